# packaging.cmake — Debian packages from the build tree: `cpack -G DEB` (or ./build.sh package).
#
# One package per install component (CMakeLists.txt, bindings/CMakeLists.txt):
#   libpstate1      runtime  libpstate.so.1 (the SONAME's package name, as Debian names libraries)
#   libpstate-dev   dev      pstate/pstate.h, libpstate.so, pstate.pc, the CMake package
#   pstate          cli      the `pstate` command (links the library statically: no libpstate1)
#   python3-pstate  python   `import pstate` for Debian's python3 (lib/python3/dist-packages)
# installed under /usr; dependencies on system libraries (libucx0, libc6, ...) come from
# dpkg-shlibdeps (package dpkg-dev), and each package of ours depends on the exact version of
# libpstate1 it was built with. tests/packages/test_deb.sh builds them, installs them with apt-get
# in a throwaway root, uses them, and removes them.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME pstate)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_CONTACT "pstate developers <pstate-dev@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime dev cli)
if(TARGET pstate_python)
  list(APPEND CPACK_COMPONENTS_ALL python)
endif()
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# dpkg-shlibdeps resolves our own libpstate.so.1 in the build tree (the python module links it)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${PROJECT_BINARY_DIR})
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)  # libpstate1 carries a shlibs file for its dependents

# The runtime package is named after the SONAME (libpstate.so.<major> -> libpstate<major>), so a
# new major installs beside the old one instead of replacing it.
set(_pstate_runtime libpstate${PROJECT_VERSION_MAJOR})
set(_pstate_exact "${_pstate_runtime} (= ${PROJECT_VERSION})")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME ${_pstate_runtime})
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION
    "${PROJECT_DESCRIPTION}: the shared library (libpstate.so.${PROJECT_VERSION_MAJOR})")
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libpstate-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "${_pstate_exact}")
set(CPACK_COMPONENT_DEV_DESCRIPTION "${PROJECT_DESCRIPTION}: header, pkg-config and CMake files")
set(CPACK_DEBIAN_CLI_PACKAGE_NAME pstate)
set(CPACK_DEBIAN_CLI_PACKAGE_SECTION net)
set(CPACK_COMPONENT_CLI_DESCRIPTION "${PROJECT_DESCRIPTION}: the pstate command (layout, info, run, bench)")
set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-pstate)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
if(PSTATE_PYTHON_MINOR)  # the module is built for one Python 3 minor version
  math(EXPR _next_minor "${PSTATE_PYTHON_MINOR} + 1")
  set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS
      "${_pstate_exact}, python3 (>= 3.${PSTATE_PYTHON_MINOR}), python3 (<< 3.${_next_minor})")
endif()
set(CPACK_DEBIAN_PYTHON_PACKAGE_CONTROL_EXTRA ${CMAKE_CURRENT_LIST_DIR}/deb/prerm)  # removes __pycache__
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_COMPONENT_PYTHON_DESCRIPTION "${PROJECT_DESCRIPTION}: the Python module (import pstate)")
include(CPack)
