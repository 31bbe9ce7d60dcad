# Run by the layer_rules test (see tdctl_layers.cmake): for every layer L and
# every layer M, a header of M must be visible to L's sources exactly when the
# rules let L use M. __has_include asks the preprocessor without opening the
# header, so nothing else the header includes matters.
cmake_minimum_required(VERSION 3.25)
string(REPLACE "," ";" layers "${LAYERS}")

# One probe for all layers: a line "<layer> visible" or "<layer> hidden" each.
set(probe ${LAYER_DIR}/probe.cpp)
file(WRITE ${probe} "")
foreach(other IN LISTS layers)
  file(GLOB headers RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/${other}/*.hpp)
  list(GET headers 0 header)
  file(APPEND ${probe} "#if __has_include(\"${header}\")\n${other} visible\n#else\n${other} hidden\n#endif\n")
endforeach()

set(failures "")
foreach(layer IN LISTS layers)
  include(${LAYER_DIR}/${layer}.cmake)   # sets `sees` and `include_dirs`
  set(flags "")
  foreach(dir IN LISTS include_dirs)
    list(APPEND flags "-I${dir}")
  endforeach()
  execute_process(COMMAND ${CXX} -E -P ${flags} ${probe}
    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "preprocessing the probe for ${layer} failed: ${err}")
  endif()
  foreach(other IN LISTS layers)
    if(other IN_LIST sees)
      set(want visible)
    else()
      set(want hidden)
    endif()
    if(NOT out MATCHES "(^|\n)${other} ${want}\n")
      string(APPEND failures "  ${other}/ headers should be ${want} to ${layer}/ sources\n")
    endif()
  endforeach()
endforeach()
file(REMOVE ${probe})
if(failures)
  message(FATAL_ERROR "layer rules broken:\n${failures}")
endif()
message(STATUS "layer rules hold for: ${layers}")
