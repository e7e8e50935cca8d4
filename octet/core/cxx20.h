// octet's headers are C++20 (concepts, designated initialisers, std::span,
// ...). The headers every other installed header builds on include this one
// first, so that a program compiled as C++17 or older stops at one message
// saying so rather than at hundreds of errors inside octet (g++ 12 compiles
// as C++17 unless told otherwise). tests/install checks the message.
#pragma once

#if !defined(__cplusplus) || __cplusplus < 202002L
#error "octet's headers need C++20: compile with -std=c++20 or later"
#endif
