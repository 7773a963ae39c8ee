module github.com/shoal-dev/shoal

go 1.26
