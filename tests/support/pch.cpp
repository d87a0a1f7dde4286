// The object the test sources' precompiled header is built for (tests/CMakeLists.txt).
