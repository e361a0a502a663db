# cmake -P script: the README's embedding example is examples/embed.cpp verbatim (the block
# between <!-- example:embed.cpp --> and <!-- /example:embed.cpp -->), so that the snippet a user
# copies is the program the tests build and run (test examples.embed).
file(READ ${README} readme)
file(READ ${SOURCE} source)
string(FIND "${readme}" "<!-- example:embed.cpp -->\n```cpp\n" begin)
string(FIND "${readme}" "```\n<!-- /example:embed.cpp -->" end)
if(begin EQUAL -1 OR end EQUAL -1)
  message(FATAL_ERROR "README.md: no <!-- example:embed.cpp --> block")
endif()
string(LENGTH "<!-- example:embed.cpp -->\n```cpp\n" opening)
math(EXPR begin "${begin} + ${opening}")
math(EXPR length "${end} - ${begin}")
string(SUBSTRING "${readme}" ${begin} ${length} snippet)
if(NOT snippet STREQUAL source)
  message(FATAL_ERROR "README.md's embedding example differs from ${SOURCE}: copy the file into "
                      "the README block (or the block into the file)")
endif()
message("README.md's embedding example is ${SOURCE}")
