# Turns one kernels/cuda/*.cu into C++ for the GPU emulator (scd_emu/device.h):
#   cmake -DIN=<file.cu> -DOUT=<file.cc> -P transform.cmake
#   - `kernel<<<config>>>(args)` -> `kernel ^ ::scd_emu::LaunchConfig(config)(args)`;
#   - `extern __shared__ [__align__(n)] T name[];` -> `T* name = (T*)DynamicShared();`;
#   - the emulator's header first, and a #line so that errors point into the .cu file.
# Nothing else changes: the emulated kernels are the kernels.
file(READ "${IN}" text)
string(REPLACE "<<<" " ^ ::scd_emu::LaunchConfig(" text "${text}")
string(REPLACE ">>>" ")" text "${text}")
string(REGEX REPLACE
       "extern __shared__ (__align__\\([0-9]+\\) )?([A-Za-z_][A-Za-z0-9_ ]*[A-Za-z0-9_]) ([A-Za-z_][A-Za-z0-9_]*)\\[\\];"
       "\\2* \\3 = static_cast<\\2*>(::scd_emu::DynamicShared());" text "${text}")
if(text MATCHES "extern __shared__")
  message(FATAL_ERROR "${IN}: an `extern __shared__` declaration the emulator cannot rewrite")
endif()
file(WRITE "${OUT}.tmp" "#include \"scd_emu/device.h\"\n#line 1 \"${IN}\"\n${text}")
file(RENAME "${OUT}.tmp" "${OUT}")
