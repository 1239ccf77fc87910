module github.com/e31net/e31/cmd/e31

go 1.26.0
