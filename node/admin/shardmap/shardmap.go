// Package shardmap serves the live shard-map page of the admin API.
//
// This is a placeholder until the real page lands: it serves a tiny
// embedded index.html so that node/admin compiles and mounts it.
package shardmap

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// Handler serves the page's static files; mount it under a prefix with
// http.StripPrefix.
func Handler() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return http.FileServer(http.FS(sub))
}
