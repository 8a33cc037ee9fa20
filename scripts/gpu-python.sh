#!/usr/bin/env bash
# The Python package on a GPU machine, built against that machine's own
# Python, pybind11 and PyTorch (CUDA), then python/tests/test_ops.py: the
# PyTorch operators on CUDA tensors against the CPU ones (docs/python.md,
# "PyTorch operators"). Takes the static libraries and headers that
# scripts/gpu-pack.sh packed (.gpu/lib, .gpu/include): the device machine
# has nvcc, torch and pybind11 but not fmt or dlpack. Compiles with g++ and
# the flags torch.utils.cpp_extension gives, so no CMake configure is needed.
#   bash scripts/gpu-python.sh [PACK=.gpu] [OUT_DIR=gpu-out]
# PYTHON picks the interpreter (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
pack=$(realpath "${1:-.gpu}")
out=$(realpath -m "${2:-gpu-out}")
py=${PYTHON:-python3}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pkg=$work/python/specdec
mkdir -p "$pkg" "$work/obj"

read -r torch_inc torch_lib abi ext <<< "$("$py" - <<'EOF'
import sysconfig, torch
from torch.utils.cpp_extension import include_paths, library_paths
print(",".join(include_paths()), library_paths()[0], int(torch._C._GLIBCXX_USE_CXX11_ABI),
      sysconfig.get_config_var("EXT_SUFFIX"))
EOF
)"
py_inc=$("$py" -m pybind11 --includes 2>/dev/null || "$py" -c "import pybind11, sysconfig; print('-I' + pybind11.get_include(), '-I' + sysconfig.get_paths()['include'])")
flags=(-std=c++20 -O2 -fPIC -DNDEBUG "-D_GLIBCXX_USE_CXX11_ABI=$abi" -Iinclude "-I$pack/include")
IFS=, read -r -a torch_dirs <<< "$torch_inc"
torch_flags=("${torch_dirs[@]/#/-isystem}")
echo "python: $("$py" --version), torch $("$py" -c 'import torch; print(torch.__version__, torch.version.cuda)'), ABI $abi"

# Object files, all at once: the operators (torch), the module (pybind11).
compile() {  # source kind
  local obj
  obj="$work/obj/$(basename "$1" .cpp).o"
  if [ "$2" = torch ]; then
    g++ "${flags[@]}" "${torch_flags[@]}" -c "$1" -o "$obj"
  else
    # shellcheck disable=SC2086  # py_inc is a list of flags
    g++ "${flags[@]}" $py_inc -c "$1" -o "$obj"
  fi
}
pids=()
for s in torch_ops torch_ops_cuda; do compile "python/src/$s.cpp" torch >> "$out/python_build.log" 2>&1 & pids+=($!); done
for s in module bind_core bind_rules bind_drafting bind_testing bind_engine bind_torch; do
  compile "python/src/$s.cpp" py >> "$out/python_build.log" 2>&1 & pids+=($!)
done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=1; done
if [ $failed = 1 ]; then tail -30 "$out/python_build.log"; exit 1; fi

g++ -shared -o "$pkg/_torch_ops.so" "$work/obj/torch_ops.o" "$work/obj/torch_ops_cuda.o" \
  "$pack/lib/libspecdec_cuda.a" "$pack/lib/libspecdec_cpu.a" "$pack/lib/libspecdec_io.a" -L"$torch_lib" -Wl,-rpath,"$torch_lib" \
  -ltorch -ltorch_cpu -lc10 -L"$pack/lib" -Wl,-rpath,"$pack/lib" -l:libfmt.so.9 -l:libcudart.so.13 \
  >> "$out/python_build.log" 2>&1
g++ -shared -o "$pkg/_specdec$ext" "$work"/obj/{module,bind_core,bind_rules,bind_drafting,bind_testing,bind_engine,bind_torch}.o \
  "$pack/lib/libspecdec_io.a" "$pack/lib/libspecdec_tokenizer.a" -L"$pack/lib" -Wl,-rpath,"$pack/lib" -l:libfmt.so.9 \
  >> "$out/python_build.log" 2>&1
cp python/specdec/*.py "$pkg/"
echo "built $(ls "$pkg" | tr '\n' ' ')"

# The operators' tests: CPU ones, and the CUDA ones a device enables.
PYTHONPATH=$work/python "$py" -m pytest -q -p no:cacheprovider -rs python/tests/test_ops.py 2>&1 | tee "$out/test_ops.log"
exit "${PIPESTATUS[0]}"
