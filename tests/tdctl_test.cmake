# tdctl_add_test(NAME SOURCES... LIBS ... [TIMEOUT s] [LABELS ...])
# Builds a doctest executable (doctest's main comes from tests/support/doctest_main.cpp)
# and registers it as one CTest test with a timeout; exit code 77 means skipped.
function(tdctl_add_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  if(TDCTL_TSAN)
    # ThreadSanitizer runs code 5-15 times slower, and each fork copies the
    # page tables of its shadow memory.
    math(EXPR T_TIMEOUT "${T_TIMEOUT} * 5")
  endif()
  add_executable(${name} ${T_SOURCES})
  # A test's own code is compiled with -Og: it halves the compile time of a
  # test file (nlohmann-json, doctest and fmt templates dominate) and keeps
  # it debuggable. tdctl and the fixture programs keep the build type's flags.
  target_compile_options(${name} PRIVATE $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CONFIG:RelWithDebInfo,Release>>:-Og>)
  target_link_libraries(${name} PRIVATE tdctl_test_support doctest::doctest ${T_LIBS})
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES TIMEOUT ${T_TIMEOUT} SKIP_RETURN_CODE 77)
  if(T_LABELS)
    set_tests_properties(${name} PROPERTIES LABELS "${T_LABELS}")
  endif()
  if(name IN_LIST TDCTL_SANITIZER_TESTS)
    set_property(TEST ${name} APPEND PROPERTY LABELS sanitize)
  endif()
  if(name IN_LIST TDCTL_TSAN_TESTS)
    set_property(TEST ${name} APPEND PROPERTY LABELS tsan)
  endif()
  if(TDCTL_TSAN)
    # A report ends the program with both stacks (exit code 66).
    set_property(TEST ${name} APPEND PROPERTY ENVIRONMENT
      "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:history_size=4")
  endif()
  if(TDCTL_SANITIZE)
    # A report (leaks included) ends the program with a stack; the tdctl a
    # test runs inherits the same options.
    set_property(TEST ${name} APPEND PROPERTY ENVIRONMENT
      "ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1"
      "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
  endif()
endfunction()
