# tests/docs/docs_listings.cmake: the documentation checks' ctest declarations, beside the scripts
# they run (docs_listings.py, readme_listings.py, docs_links.py); tests/CMakeLists.txt includes
# it.
#
# docs_listings — the example listings of docs/bindings.md are the example files (issue 18: the
# Rust listing showed code that does not print the output shown under it). For each listing that
# starts with a comment naming an example file, its lines must equal that file's without the
# file's head comment (Python docstring, Rust //! lines). The printed lines are checked by the
# bindings_*_example tests.
find_program(PSTATE_PYTHON3 python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(PSTATE_PYTHON3)
  add_test(NAME docs_listings COMMAND ${PSTATE_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/docs_listings.py ${PROJECT_SOURCE_DIR})
  set_tests_properties(docs_listings PROPERTIES TIMEOUT 60)
endif()

# readme_listings — README.md's C programs (the first listing a user copies, and the dlopen one),
# and any under docs/
# compile with -Wpedantic -Werror and run: the pipeline listing under `pstate run -n 4`, checking
# its own results (tests/docs/readme_listings.py).
if(PSTATE_PYTHON3)
  add_test(NAME readme_listings
           COMMAND ${PSTATE_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/readme_listings.py ${PROJECT_SOURCE_DIR}
                   $<TARGET_FILE_DIR:pstate> ${CMAKE_C_COMPILER} $<TARGET_FILE:pstate_cli>)
  set_tests_properties(readme_listings PROPERTIES TIMEOUT 180)
endif()

# docs_links — every relative link of every Markdown file of the tree resolves, anchors included
# (tests/docs/docs_links.py; issue 41: the guides moved out of README.md, TESTING.md and
# BENCHMARKS.md, and a moved section must not leave a link behind).
if(PSTATE_PYTHON3)
  add_test(NAME docs_links COMMAND ${PSTATE_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/docs_links.py ${PROJECT_SOURCE_DIR})
  set_tests_properties(docs_links PROPERTIES TIMEOUT 60)
endif()
