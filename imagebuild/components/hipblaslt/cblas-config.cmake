# cblas package configuration for hipBLASLt's clients before 1.1 (imagebuild).
#
# Their clients/CMakeLists.txt calls find_package(cblas REQUIRED CONFIG) and hipblaslt-bench
# links the names `lapack cblas`; upstream's install.sh -d gets this file from the netlib
# LAPACK it builds into /usr/local. This one describes the distro's libraries instead
# (Debian/Ubuntu libblas-dev carries the cblas_* functions and cblas.h, liblapack-dev
# liblapack): imported targets named cblas and lapack, which those names then link.
if(NOT TARGET cblas)
  find_library(IMAGEBUILD_CBLAS_LIBRARY NAMES cblas blas)
  find_library(IMAGEBUILD_LAPACK_LIBRARY NAMES lapack)
  find_path(IMAGEBUILD_CBLAS_INCLUDE_DIR NAMES cblas.h
            PATH_SUFFIXES x86_64-linux-gnu aarch64-linux-gnu)
  if(NOT IMAGEBUILD_CBLAS_LIBRARY OR NOT IMAGEBUILD_LAPACK_LIBRARY
     OR NOT IMAGEBUILD_CBLAS_INCLUDE_DIR)
    set(cblas_FOUND FALSE)
    set(cblas_NOT_FOUND_MESSAGE "cblas: need the distro's BLAS with CBLAS (libblas.so or "
        "libcblas.so, cblas.h) and LAPACK (liblapack.so): libblas-dev and liblapack-dev")
    return()
  endif()
  add_library(cblas UNKNOWN IMPORTED)
  set_target_properties(cblas PROPERTIES
    IMPORTED_LOCATION "${IMAGEBUILD_CBLAS_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${IMAGEBUILD_CBLAS_INCLUDE_DIR}")
  add_library(lapack UNKNOWN IMPORTED)
  set_target_properties(lapack PROPERTIES
    IMPORTED_LOCATION "${IMAGEBUILD_LAPACK_LIBRARY}"
    INTERFACE_LINK_LIBRARIES cblas)
endif()
set(cblas_FOUND TRUE)
