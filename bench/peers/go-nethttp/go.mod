module peregrine.bench/go-nethttp

go 1.22
