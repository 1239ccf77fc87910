module github.com/e31net/e31/services/release

go 1.26.0

require github.com/e31net/e31/pkg v0.0.0

replace github.com/e31net/e31/pkg => ../../pkg
