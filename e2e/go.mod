module github.com/e31net/e31/e2e

go 1.26.0
