# All dependencies come from Debian packages (scripts/install-deps.sh) or the
# CUDA toolkit on the machine. See README.md.
find_package(Threads REQUIRED)
find_package(Protobuf REQUIRED)            # CMake's FindProtobuf module (Debian ships no config)
find_package(gRPC CONFIG REQUIRED)
find_package(absl CONFIG REQUIRED)         # 20220623: no absl::log; see include/psync/common/logging.h
find_package(Gloo CONFIG REQUIRED)         # imported target is plain `gloo`
find_package(ZLIB REQUIRED)                # zlib1g-dev: gzip-compressed IDX files (worker/data)
set(BLA_VENDOR OpenBLAS)
find_package(BLAS REQUIRED)
find_path(CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas-pthread openblas REQUIRED)
add_library(psync_cblas INTERFACE)
target_link_libraries(psync_cblas INTERFACE BLAS::BLAS)
target_include_directories(psync_cblas INTERFACE ${CBLAS_INCLUDE_DIR})
# oneDNN (libdnnl-dev): bfloat16 matrix products on the CPU (worker/tensor/cpu/onednn_gemm.h).
# Found by hand: Debian's dnnl-config.cmake demands OpenCL (its GPU runtime),
# which psync does not use. Debian's build runs its threads with OpenMP
# (libgomp); psync sets their number to OpenBLAS's (omp_set_num_threads).
find_path(DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.hpp)
find_library(DNNL_LIBRARY dnnl)
if(NOT DNNL_INCLUDE_DIR OR NOT DNNL_LIBRARY)
  message(FATAL_ERROR "oneDNN not found: install libdnnl-dev (scripts/install-deps.sh)")
endif()
add_library(psync_dnnl INTERFACE)
target_include_directories(psync_dnnl INTERFACE ${DNNL_INCLUDE_DIR})
target_link_libraries(psync_dnnl INTERFACE ${DNNL_LIBRARY})
find_package(OpenMP REQUIRED)

# ---- CUDA (optional): built whenever nvcc is found.
set(PSYNC_HAVE_CUDA OFF)
if(WITH_CUDA)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)     # H100/H200. Never "native": build hosts have no GPU.
    endif()
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared) # one libcudart.so shared with cuBLAS and NCCL
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ENV NCCL_HOME ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
    find_library(NCCL_LIBRARY nccl HINTS ENV NCCL_HOME ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
    if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
      message(FATAL_ERROR "CUDA found but NCCL not found: set NCCL_HOME, or configure with -DWITH_CUDA=OFF")
    endif()
    add_library(NCCL::nccl SHARED IMPORTED)
    set_target_properties(NCCL::nccl PROPERTIES
      IMPORTED_LOCATION "${NCCL_LIBRARY}" INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
    set(PSYNC_HAVE_CUDA ON)
    message(STATUS "psync: CUDA ${CMAKE_CUDA_COMPILER_VERSION}, archs=${CMAKE_CUDA_ARCHITECTURES}, NCCL=${NCCL_LIBRARY}")
  else()
    message(STATUS "psync: no CUDA compiler found, building CPU-only")
  endif()
endif()

# Every psync target compiles with warnings on.
function(psync_warnings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
endfunction()
