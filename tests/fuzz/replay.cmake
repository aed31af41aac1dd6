# Seed replays of the libFuzzer targets in the regular (gcc) build: each target's source with
# replay_main.cc instead of libFuzzer, linked against the libraries the build already has, and
# one ctest per target that runs it over corpus/<target>/. They keep every target compiling
# and every seed passing its checks on each test run; fuzzing proper, with clang, libFuzzer and
# the sanitizers, is scripts/fuzz.sh (by hand; docs/RESULTS.md records the runs).

# scd_add_seed_replay(<target> <corpus> LIBS ...)
function(scd_add_seed_replay name corpus)
  cmake_parse_arguments(ARG "" "" "LIBS" ${ARGN})
  set(exe ${name}_replay)
  add_executable(${exe} ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/${name}.cc
                        ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/replay_main.cc)
  target_link_libraries(${exe} PRIVATE ${ARG_LIBS})
  set_target_properties(${exe} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests/fuzz)
  add_test(NAME fuzz_seeds_${name} COMMAND ${exe} ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/${corpus})
  set_tests_properties(fuzz_seeds_${name} PROPERTIES TIMEOUT 120 LABELS fuzz)
endfunction()

scd_add_seed_replay(safetensors_header_fuzz safetensors_header LIBS scd_model)
scd_add_seed_replay(model_config_fuzz model_config LIBS scd_model)
scd_add_seed_replay(tokenizer_json_fuzz tokenizer_json LIBS scd_tokenizer)
scd_add_seed_replay(bpe_fuzz bpe LIBS scd_tokenizer)
target_compile_definitions(
  bpe_fuzz_replay PRIVATE SCD_FUZZ_TOKENIZER_JSON="${SCD_SHARED_DIR}/models/stories260K/tokenizer.json")
scd_add_seed_replay(wire_format_fuzz wire_format LIBS scd_scd)
scd_add_seed_replay(artifact_fuzz artifact LIBS scd_scd)
scd_add_seed_replay(openai_request_fuzz openai_request LIBS scd_http)
scd_add_seed_replay(daemon_config_fuzz daemon_config
                    LIBS scd_prefill_server scd_decode_server scd_config)
