# Generated protobuf + gRPC code for every service. Included from the top-level
# CMakeLists.txt so that protoc runs with -I <repo root> and the generated headers land at
# build/base/proto/*.pb.h, included as "base/proto/x.pb.h".
set(PHALANX_PROTOS
  base/proto/common.proto base/proto/gcs.proto base/proto/node.proto
  base/proto/worker.proto)
add_library(phalanx_proto STATIC ${PHALANX_PROTOS})
target_include_directories(phalanx_proto PUBLIC ${CMAKE_BINARY_DIR})
target_link_libraries(phalanx_proto PUBLIC protobuf::libprotobuf gRPC::grpc++)
protobuf_generate(TARGET phalanx_proto LANGUAGE cpp PROTOC_OUT_DIR ${CMAKE_BINARY_DIR})
protobuf_generate(TARGET phalanx_proto LANGUAGE grpc
  GENERATE_EXTENSIONS .grpc.pb.h .grpc.pb.cc
  PLUGIN "protoc-gen-grpc=$<TARGET_FILE:gRPC::grpc_cpp_plugin>"
  PROTOC_OUT_DIR ${CMAKE_BINARY_DIR})
