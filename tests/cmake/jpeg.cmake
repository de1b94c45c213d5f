# JPEG pipeline tests: the test helper, the torchvision reference comparison
# and the broken-file corpus. Needs libjpeg-turbo; Python parts need python3
# with numpy, torch, torchvision and PIL (the script skips itself otherwise).
if(LADE_HAVE_JPEG)
  add_executable(jpeg_crop ${PROJECT_SOURCE_DIR}/tests/tools/jpeg_crop.c)
  target_include_directories(jpeg_crop PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_compile_definitions(jpeg_crop PRIVATE _GNU_SOURCE)
  target_link_libraries(jpeg_crop PRIVATE lade_static)

  # Lossless rewrites with arithmetic coding / restart markers / progressive scans.
  add_executable(jpeg_transcode ${PROJECT_SOURCE_DIR}/tests/tools/jpeg_transcode.c)
  target_link_libraries(jpeg_transcode PRIVATE JPEG::JPEG)

  add_test(NAME jpeg_corpus_fails_cleanly
           COMMAND ${CMAKE_COMMAND} -DHELPER=$<TARGET_FILE:jpeg_crop>
                   -DCORPUS=${PROJECT_SOURCE_DIR}/fuzz/corpus/jpeg
                   -P ${PROJECT_SOURCE_DIR}/tests/tools/jpeg_corpus_check.cmake)
  set_tests_properties(jpeg_corpus_fails_cleanly PROPERTIES LABELS jpeg TIMEOUT 300)

  if(LADE_PYTHON3)
    add_test(NAME jpeg_reference_torchvision
             COMMAND ${LADE_PYTHON3} ${PROJECT_SOURCE_DIR}/tests/python/jpeg_reference.py
                     --helper $<TARGET_FILE:jpeg_crop> --transcode $<TARGET_FILE:jpeg_transcode> --tmp ${CMAKE_CURRENT_BINARY_DIR}/tmp/jpeg_reference)
    set_tests_properties(jpeg_reference_torchvision PROPERTIES LABELS jpeg TIMEOUT 600 SKIP_RETURN_CODE 77)
    # Truncated JPEGs: one verdict per file for every seed, and it is PIL's.
    add_test(NAME jpeg_truncation_verdict
             COMMAND ${LADE_PYTHON3} ${PROJECT_SOURCE_DIR}/tests/python/jpeg_truncation.py
                     --helper $<TARGET_FILE:jpeg_crop> --transcode $<TARGET_FILE:jpeg_transcode>
                     --tmp ${CMAKE_CURRENT_BINARY_DIR}/tmp/jpeg_truncation)
    set_tests_properties(jpeg_truncation_verdict PROPERTIES LABELS jpeg TIMEOUT 300 SKIP_RETURN_CODE 77)
    # The same comparison on each other path the decoder may take, fixed by
    # its environment switch: the portable C loops (no AVX2, no AVX-512);
    # the AVX2 passes where the CPU would take the AVX-512 ones; the VNNI
    # horizontal pass where it would take the one-load VBMI one; each of the
    # rows-per-call choices the decoder tunes between at run time
    # (src/transform/imgjpeg.c); the RGBX-row passes the tuner may also
    # choose (LADE_NO_RGB: the VBMI one; LADE_HPASS=vnni-rgbx, avx2-rgbx). All must give
    # torchvision's values.
    foreach(variant nosimd:LADE_NO_SIMD=1 avx2:LADE_NO_AVX512=1 novbmi:LADE_NO_VBMI=1 rows1:LADE_JPEG_ROWS=1
                    rows16:LADE_JPEG_ROWS=16 norgb:LADE_NO_RGB=1 vnnirgbx:LADE_HPASS=vnni-rgbx
                    avx2rgbx:LADE_HPASS=avx2-rgbx)
      string(REPLACE ":" ";" parts ${variant})
      list(GET parts 0 suffix)
      list(GET parts 1 envset)
      add_test(NAME jpeg_reference_torchvision_${suffix}
               COMMAND ${CMAKE_COMMAND} -E env ${envset} ${LADE_PYTHON3}
                       ${PROJECT_SOURCE_DIR}/tests/python/jpeg_reference.py --helper $<TARGET_FILE:jpeg_crop>
                       --transcode $<TARGET_FILE:jpeg_transcode> --tmp ${CMAKE_CURRENT_BINARY_DIR}/tmp/jpeg_reference_${suffix})
      set_tests_properties(jpeg_reference_torchvision_${suffix} PROPERTIES LABELS jpeg TIMEOUT 600 SKIP_RETURN_CODE 77)
    endforeach()
  endif()

  # The synthetic dataset generator (tools/gen_jpeg.c).
  add_executable(gen_jpeg_check ${PROJECT_SOURCE_DIR}/tests/tools/gen_jpeg_check.c ${PROJECT_SOURCE_DIR}/tools/gen_jpeg.c)
  target_include_directories(gen_jpeg_check PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tools)
  target_compile_definitions(gen_jpeg_check PRIVATE _GNU_SOURCE)
  target_link_libraries(gen_jpeg_check PRIVATE lade_static)
  add_test(NAME gen_jpeg COMMAND ${CMAKE_COMMAND} -E env sh -c
           "rm -rf \"$1\" && mkdir -p \"$1\" && exec \"$0\" \"$1\"" $<TARGET_FILE:gen_jpeg_check>
           ${CMAKE_CURRENT_BINARY_DIR}/tmp/gen_jpeg)
  set_tests_properties(gen_jpeg PROPERTIES LABELS jpeg TIMEOUT 120)

  add_executable(bench_jpeg_transform ${PROJECT_SOURCE_DIR}/bench/jpeg_transform.c
                 ${PROJECT_SOURCE_DIR}/tools/gen_jpeg.c ${PROJECT_SOURCE_DIR}/tools/ceiling.c
                 ${PROJECT_SOURCE_DIR}/tools/jpeg_stages.c)
  target_include_directories(bench_jpeg_transform PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tools)
  target_compile_definitions(bench_jpeg_transform PRIVATE _GNU_SOURCE)
  target_link_libraries(bench_jpeg_transform PRIVATE lade_static)
  # TurboJPEG's whole-image decode as one of the ceilings (optional: Debian
  # libturbojpeg0-dev; without it the scanline API's block reads stand alone)
  find_path(LADE_TURBOJPEG_INCLUDE turbojpeg.h)
  find_library(LADE_TURBOJPEG_LIB turbojpeg)
  if(LADE_TURBOJPEG_INCLUDE AND LADE_TURBOJPEG_LIB)
    target_compile_definitions(bench_jpeg_transform PRIVATE LADE_BENCH_TURBOJPEG)
    target_include_directories(bench_jpeg_transform PRIVATE ${LADE_TURBOJPEG_INCLUDE})
    target_link_libraries(bench_jpeg_transform PRIVATE ${LADE_TURBOJPEG_LIB})
  endif()
endif()

# the horizontal pass alone, per path (bench/RESULTS.md has the figures)
add_executable(bench_image_passes ${PROJECT_SOURCE_DIR}/bench/image_passes.c)
target_include_directories(bench_image_passes PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_definitions(bench_image_passes PRIVATE _GNU_SOURCE)
target_link_libraries(bench_image_passes PRIVATE lade_static)

# decode_scale=off vs auto throughput (docs/transform.md has the command).
add_executable(bench_decode_scale ${PROJECT_SOURCE_DIR}/tests/tools/bench_decode_scale.c)
target_include_directories(bench_decode_scale PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_definitions(bench_decode_scale PRIVATE _GNU_SOURCE)
target_link_libraries(bench_decode_scale PRIVATE lade_static)
