module peregrine.bench/go-fasthttp

// fasthttp v1.74.0 and later depend on github.com/molecule-man/go-brrr, which
// the Go module proxy refused (403) when this was pinned; v1.73.0 is the
// newest release that builds from the proxy alone.

go 1.25.0

require github.com/valyala/fasthttp v1.73.0

require (
	github.com/andybalholm/brotli v1.2.2 // indirect
	github.com/klauspost/compress v1.19.1 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
)
