# Runs EXE; fails unless it exits with status 0 and its standard output matches every regular
# expression in EXPECT (separated by "|;|"). Used by the example tests.
execute_process(COMMAND ${EXE} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${EXE} exited with status ${rc}")
endif()
string(REPLACE "|;|" ";" patterns "${EXPECT}")
foreach(p IN LISTS patterns)
  if(NOT out MATCHES "${p}")
    message(FATAL_ERROR "the output does not match \"${p}\"")
  endif()
endforeach()
