// Package cudatest builds the C stand-in for the CUDA driver
// (cudabridge/testdata/fakecuda.c) for tests, as net/http/httptest serves
// HTTP for them: a libcuda.so.1 with the driver's functions and the
// model's kernels in C, so that the real binding, and the commands that
// use it, run end to end without a GPU.
//
// Imported by: nothing (only the tests of cudabridge and cmd/batchd). It
// imports nothing of batchd.
package cudatest
