# tests/unit/crypto_library.cmake: beside test_store_hmac.cpp, which checks libcrypto's answers;
# tests/CMakeLists.txt includes it.
#
# crypto_library — the store's cryptography is OpenSSL's, none of our own (issue 31 item 14):
# libpstate.so.<major> needs libcrypto.so.3 (readelf -d), and no file under src/ holds a SHA-256
# round or initial-state constant (what any hand-written SHA-256 or HMAC-SHA256 must spell out)
# or an HMAC pad byte pattern. That libcrypto's answers are right is test_store_hmac's (RFC 4231
# vectors and Python's hmac module).
#
# Included from tests/CMakeLists.txt this file declares the test; run with `cmake -P` it checks.
if(NOT CMAKE_SCRIPT_MODE_FILE)
  add_test(NAME crypto_is_libcrypto
           COMMAND ${CMAKE_COMMAND} -DLIB=$<TARGET_FILE:pstate> -DSRC=${PROJECT_SOURCE_DIR}/src
                   -P ${CMAKE_CURRENT_LIST_FILE})
  set_tests_properties(crypto_is_libcrypto PROPERTIES TIMEOUT 60)
  return()
endif()

execute_process(COMMAND readelf -d ${LIB} OUTPUT_VARIABLE dynamic RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "readelf -d ${LIB} failed (${rc})")
endif()
if(NOT dynamic MATCHES "NEEDED[^\n]*\\[libcrypto\\.so\\.3\\]")
  message(FATAL_ERROR "${LIB} does not need libcrypto.so.3: the store's HMAC must come from OpenSSL\n${dynamic}")
endif()

# SHA-256's first round constant and first initial hash word, and HMAC's ipad/opad bytes.
file(GLOB_RECURSE sources ${SRC}/*.cpp ${SRC}/*.hpp ${SRC}/*.c ${SRC}/*.h)
set(found "")
foreach(f IN LISTS sources)
  file(STRINGS ${f} hits REGEX "0x428a2f98|0x6a09e667|0x5c5c5c5c|0x36363636|0x5[cC]u?[^0-9a-fA-Fx].*0x36|0x36u?[^0-9a-fA-Fx].*0x5[cC]")
  if(hits)
    list(APPEND found "${f}: ${hits}")
  endif()
endforeach()
if(found)
  string(REPLACE ";" "\n" found "${found}")
  message(FATAL_ERROR "SHA-256/HMAC code of our own under src/ (use OpenSSL's libcrypto, bootstrap/crypto.hpp):\n${found}")
endif()
list(LENGTH sources n)
message(STATUS "libpstate needs libcrypto.so.3; ${n} files under src/ hold no SHA-256 or HMAC constants")
