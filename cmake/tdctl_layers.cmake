# The layer rules in CMake (STYLE, Architecture 1): the folders are layers,
# and each layer's library sees the headers of its own folder and of the
# layers it uses, nothing else. No product library has the project root on
# its include path: each layer has an include root of its own,
# <build>/layers/<folder>, holding one link <folder> -> the source folder, so
# sources keep writing #include "ptrace/waiter.hpp", and an include of a
# layer above or beside fails to compile ("No such file or directory").

# tdctl_layer(<folder> [USES <lower layer>...]): the library tdctl_<folder>
# (already defined) gets its include root; it may link only the layers named
# in USES, which must be declared before it (so the layers cannot form a
# cycle). Linking any other layer stops the configuration.
function(tdctl_layer folder)
  cmake_parse_arguments(L "" "" "USES" ${ARGN})
  set(target tdctl_${folder})
  get_property(declared GLOBAL PROPERTY TDCTL_LAYERS)
  set(sees ${folder})
  foreach(used IN LISTS L_USES)
    if(NOT used IN_LIST declared)
      message(FATAL_ERROR "layer ${folder} uses ${used}, which is not a layer declared below it")
    endif()
    get_property(used_sees GLOBAL PROPERTY TDCTL_LAYER_SEES_${used})
    list(APPEND sees ${used_sees})
  endforeach()
  list(REMOVE_DUPLICATES sees)

  # A library tdctl_<name> with a folder <name> of its own is a layer.
  get_target_property(links ${target} LINK_LIBRARIES)
  foreach(lib IN LISTS links)
    if(NOT lib MATCHES "^tdctl_(.+)$")
      continue()
    endif()
    set(name ${CMAKE_MATCH_1})
    if(EXISTS ${PROJECT_SOURCE_DIR}/${name}/CMakeLists.txt AND NOT name IN_LIST L_USES)
      message(FATAL_ERROR "${target} links ${lib}: layer ${folder} may use only: ${L_USES}")
    endif()
  endforeach()

  set(root ${PROJECT_BINARY_DIR}/layers/${folder})
  file(MAKE_DIRECTORY ${root})
  file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${folder} ${root}/${folder} SYMBOLIC)
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${root}>)

  # For the layer_rules test: what the layer's own sources are compiled with.
  file(GENERATE OUTPUT ${PROJECT_BINARY_DIR}/layers/${folder}.cmake CONTENT
    "set(sees \"${sees}\")\nset(include_dirs \"$<TARGET_PROPERTY:${target},INCLUDE_DIRECTORIES>\")\n")
  set_property(GLOBAL APPEND PROPERTY TDCTL_LAYERS ${folder})
  set_property(GLOBAL PROPERTY TDCTL_LAYER_SEES_${folder} ${sees})
endfunction()

# tdctl_layer_rules_test(): a CTest test, layer_rules, that asks the
# preprocessor, with each layer's include path, whether a header of every
# layer is visible, and fails when what it sees differs from the rules.
function(tdctl_layer_rules_test)
  get_property(declared GLOBAL PROPERTY TDCTL_LAYERS)
  string(REPLACE ";" "," layers "${declared}")
  add_test(NAME layer_rules COMMAND ${CMAKE_COMMAND}
    -DCXX=${CMAKE_CXX_COMPILER} -DLAYERS=${layers}
    -DSOURCE_DIR=${PROJECT_SOURCE_DIR} -DLAYER_DIR=${PROJECT_BINARY_DIR}/layers
    -P ${PROJECT_SOURCE_DIR}/cmake/check_layer_rules.cmake)
  set_tests_properties(layer_rules PROPERTIES TIMEOUT 60)
endfunction()
