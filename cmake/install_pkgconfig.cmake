# install_pkgconfig.cmake — installs pstate.pc (run by `cmake --install`, install(SCRIPT) in
# CMakeLists.txt, which sets _pstate_pc_plain, _pstate_pc_rpath, _pstate_libdir and
# _pstate_multiarch first).
#
# A program linked with `pkg-config --libs pstate` must find libpstate.so.1 when it runs. Where
# the dynamic loader already looks, the plain file is installed (no rpath: Debian's packages and
# /usr/local); elsewhere the file whose Libs add -Wl,-rpath,${libdir}, and a message says what
# programs built otherwise need. The loader looks in its own directories (/lib, /usr/lib, their
# multiarch and lib64 forms) and in those listed by /etc/ld.so.conf and /etc/ld.so.conf.d/*.conf
# (read on this machine, which is where `./build.sh install` also runs ldconfig); a prefix ending
# in /usr always counts (the .deb packages, staged by cpack under another path).
set(_dir "${CMAKE_INSTALL_PREFIX}/${_pstate_libdir}")
string(REGEX REPLACE "/+$" "" _dir "${_dir}")
string(REGEX REPLACE "//+" "/" _dir "${_dir}")
set(_searched /lib /usr/lib /lib64 /usr/lib64)
if(_pstate_multiarch)
  list(APPEND _searched /lib/${_pstate_multiarch} /usr/lib/${_pstate_multiarch})
endif()
file(GLOB _confs /etc/ld.so.conf /etc/ld.so.conf.d/*.conf)
foreach(_conf IN LISTS _confs)
  file(STRINGS "${_conf}" _lines REGEX "^[ \t]*/")
  foreach(_line IN LISTS _lines)
    string(STRIP "${_line}" _line)
    string(REGEX REPLACE "/+$" "" _line "${_line}")
    list(APPEND _searched "${_line}")
  endforeach()
endforeach()
# A prefix ending in /usr is Debian's (cpack stages the packages under .../_CPack_Packages/.../usr).
list(FIND _searched "${_dir}" _at)  # (install scripts run without the project's policies: no IN_LIST)
if(CMAKE_INSTALL_PREFIX MATCHES "/usr/*$" OR NOT _at EQUAL -1)
  set(_pc "${_pstate_pc_plain}")
else()
  set(_pc "${_pstate_pc_rpath}")
  message(STATUS "pstate: ${_dir} is not a directory the dynamic loader searches: pstate.pc adds "
                 "-Wl,-rpath,${_dir}, so programs built with `pkg-config --libs pstate` (C, Go) find libpstate; "
                 "CMake's find_package(pstate) gives its build tree the rpath too. Other programs need "
                 "LD_LIBRARY_PATH=${_dir}, -Wl,-rpath,${_dir}, or the directory in /etc/ld.so.conf.d/ and ldconfig")
endif()
file(INSTALL DESTINATION "${CMAKE_INSTALL_PREFIX}/${_pstate_libdir}/pkgconfig" TYPE FILE RENAME pstate.pc FILES "${_pc}")
