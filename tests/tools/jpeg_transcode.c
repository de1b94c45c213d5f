/*
 * jpeg_transcode.c - a test helper: losslessly rewrites a JPEG (its DCT
 * coefficients, as jpegtran does) with arithmetic coding, restart markers
 * and/or progressive scans, the variants PIL cannot write. The pixels stay
 * those of the input, so tests can make images with PIL and still reach
 * every entropy-coding path of the decoder.
 *   jpeg_transcode IN OUT [arith] [restart=N] [progressive]
 * Exits 0, or 1 with "error: ..." on stderr.
 */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

static jmp_buf jb;
static void on_error(j_common_ptr c) {
  char msg[JMSG_LENGTH_MAX];
  (*c->err->format_message)(c, msg);
  fprintf(stderr, "error: %s\n", msg);
  longjmp(jb, 1);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: jpeg_transcode IN OUT [arith] [restart=N] [progressive]\n");
    return 2;
  }
  FILE *in = fopen(argv[1], "rb"), *out = fopen(argv[2], "wb");
  if (!in || !out) {
    fprintf(stderr, "error: cannot open %s or %s\n", argv[1], argv[2]);
    return 1;
  }
  struct jpeg_decompress_struct src;
  struct jpeg_compress_struct dst;
  struct jpeg_error_mgr e1, e2;
  src.err = jpeg_std_error(&e1);
  dst.err = jpeg_std_error(&e2);
  e1.error_exit = e2.error_exit = on_error;
  if (setjmp(jb)) return 1;
  jpeg_create_decompress(&src);
  jpeg_create_compress(&dst);
  jpeg_stdio_src(&src, in);
  jpeg_read_header(&src, TRUE);
  jvirt_barray_ptr *coef = jpeg_read_coefficients(&src);
  jpeg_copy_critical_parameters(&src, &dst);
  for (int i = 3; i < argc; i++) {
    if (strcmp(argv[i], "arith") == 0)
      dst.arith_code = TRUE;
    else if (strncmp(argv[i], "restart=", 8) == 0)
      dst.restart_interval = (unsigned)atoi(argv[i] + 8); /* in MCUs */
    else if (strcmp(argv[i], "progressive") == 0)
      jpeg_simple_progression(&dst);
    else {
      fprintf(stderr, "error: unknown option %s\n", argv[i]);
      return 1;
    }
  }
  dst.optimize_coding = dst.arith_code ? FALSE : TRUE;
  jpeg_stdio_dest(&dst, out);
  jpeg_write_coefficients(&dst, coef);
  jpeg_finish_compress(&dst);
  jpeg_finish_decompress(&src);
  jpeg_destroy_compress(&dst);
  jpeg_destroy_decompress(&src);
  fclose(in);
  return fclose(out) != 0;
}
