#!/usr/bin/env bash
# Prints the -march level the README's builds use on this machine: x86-64-v3
# (AVX2 + FMA) when this CPU runs it, otherwise nothing (the compiler's
# portable default). The library's own default (OCTET_CPU_ARCH) is portable;
# the AVX-512 converters are chosen at run time either way.
if /lib64/ld-linux-x86-64.so.2 --help 2>/dev/null | grep -q 'x86-64-v3 (supported'; then
  echo x86-64-v3
fi
