# Finds oneDNN (dnnl.hpp, libdnnl) and defines the imported target DNNL::dnnl.
# A module of our own: Debian's dnnl-config.cmake insists on finding OpenCL,
# which octet does not use.
include(FindPackageHandleStandardArgs)
find_path(DNNL_INCLUDE_DIR dnnl.hpp HINTS ${DNNL_ROOT} $ENV{DNNL_ROOT} PATH_SUFFIXES include include/oneapi/dnnl)
find_library(DNNL_LIBRARY dnnl HINTS ${DNNL_ROOT} $ENV{DNNL_ROOT} PATH_SUFFIXES lib lib64)
find_path(_dnnl_version_dir dnnl_version.h HINTS ${DNNL_INCLUDE_DIR} PATH_SUFFIXES oneapi/dnnl)
if(_dnnl_version_dir)
  file(STRINGS "${_dnnl_version_dir}/dnnl_version.h" _v REGEX "#define DNNL_VERSION_(MAJOR|MINOR|PATCH) +[0-9]+")
  string(REGEX REPLACE ".*DNNL_VERSION_MAJOR +([0-9]+).*" "\\1" _major "${_v}")
  string(REGEX REPLACE ".*DNNL_VERSION_MINOR +([0-9]+).*" "\\1" _minor "${_v}")
  string(REGEX REPLACE ".*DNNL_VERSION_PATCH +([0-9]+).*" "\\1" _patch "${_v}")
  set(DNNL_VERSION "${_major}.${_minor}.${_patch}")
endif()
find_package_handle_standard_args(DNNL REQUIRED_VARS DNNL_LIBRARY DNNL_INCLUDE_DIR VERSION_VAR DNNL_VERSION)
if(DNNL_FOUND AND NOT TARGET DNNL::dnnl)
  add_library(DNNL::dnnl UNKNOWN IMPORTED)
  set_target_properties(DNNL::dnnl PROPERTIES IMPORTED_LOCATION "${DNNL_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${DNNL_INCLUDE_DIR}")
endif()
mark_as_advanced(DNNL_INCLUDE_DIR DNNL_LIBRARY)
