#include <stdio.h>
#include "lade/lade.h"
int main(void) { printf("lade %s\n", lade_version()); return 0; }
