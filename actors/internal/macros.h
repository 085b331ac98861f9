// Machinery of actors/api.h, not part of the contract: the preprocessor helpers behind
// PHALANX_ACTOR, PHALANX_METHODS and PHALANX_GROUP_METHODS. Each registrar is a static object
// of actors/internal/registration.h, named after its line so that one .cc can hold many.
#pragma once

#include "actors/internal/registration.h"

#define PHALANX_INTERNAL_CAT2(a, b) a##b
#define PHALANX_INTERNAL_CAT(a, b) PHALANX_INTERNAL_CAT2(a, b)

#define PHALANX_INTERNAL_METHOD(Class, Group, Concurrency, Method)         \
  static ::phalanx::internal::MethodRegistrar<Class> PHALANX_INTERNAL_CAT( \
      PHALANX_INTERNAL_CAT(phalanx_method_registrar_, Method), __LINE__)(  \
      #Class, #Method, &Class::Method, Group, Concurrency);

// Apply M(Class, Group, Concurrency, x) to each of up to 24 method names.
#define PHALANX_INTERNAL_EACH_1(M, C, G, N, x) M(C, G, N, x)
#define PHALANX_INTERNAL_EACH_2(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_1(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_3(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_2(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_4(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_3(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_5(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_4(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_6(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_5(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_7(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_6(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_8(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_7(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_9(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_8(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_10(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_9(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_11(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_10(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_12(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_11(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_13(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_12(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_14(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_13(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_15(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_14(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_16(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_15(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_17(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_16(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_18(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_17(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_19(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_18(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_20(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_19(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_21(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_20(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_22(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_21(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_23(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_22(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_EACH_24(M, C, G, N, x, ...) \
  M(C, G, N, x) PHALANX_INTERNAL_EACH_23(M, C, G, N, __VA_ARGS__)
#define PHALANX_INTERNAL_PICK(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, \
                              _16, _17, _18, _19, _20, _21, _22, _23, _24, NAME, ...)           \
  NAME
#define PHALANX_INTERNAL_EACH(M, C, G, N, ...)                                                   \
  PHALANX_INTERNAL_PICK(                                                                         \
      __VA_ARGS__, PHALANX_INTERNAL_EACH_24, PHALANX_INTERNAL_EACH_23, PHALANX_INTERNAL_EACH_22, \
      PHALANX_INTERNAL_EACH_21, PHALANX_INTERNAL_EACH_20, PHALANX_INTERNAL_EACH_19,              \
      PHALANX_INTERNAL_EACH_18, PHALANX_INTERNAL_EACH_17, PHALANX_INTERNAL_EACH_16,              \
      PHALANX_INTERNAL_EACH_15, PHALANX_INTERNAL_EACH_14, PHALANX_INTERNAL_EACH_13,              \
      PHALANX_INTERNAL_EACH_12, PHALANX_INTERNAL_EACH_11, PHALANX_INTERNAL_EACH_10,              \
      PHALANX_INTERNAL_EACH_9, PHALANX_INTERNAL_EACH_8, PHALANX_INTERNAL_EACH_7,                 \
      PHALANX_INTERNAL_EACH_6, PHALANX_INTERNAL_EACH_5, PHALANX_INTERNAL_EACH_4,                 \
      PHALANX_INTERNAL_EACH_3, PHALANX_INTERNAL_EACH_2, PHALANX_INTERNAL_EACH_1)                 \
  (M, C, G, N, __VA_ARGS__)
