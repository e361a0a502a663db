# specdec_warnings(<target>): the project's warning set, errors when SPECDEC_WERROR is ON.
function(specdec_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${SPECDEC_WERROR}>>:-Werror>)
endfunction()
