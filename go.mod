module github.com/batchd/batchd

go 1.26.8

require (
	github.com/HdrHistogram/hdrhistogram-go v1.4.0
	pgregory.net/rapid v1.3.0
)
