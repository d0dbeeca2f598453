// The local cluster's OCI registry: go-containerregistry's in-memory registry on an address of
// our choice (its own cmd/registry listens on localhost only, which pods cannot reach).
package main

import (
	"flag"
	"log"
	"net/http"

	"github.com/google/go-containerregistry/pkg/registry"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:5000", "host:port to serve on")
	flag.Parse()
	log.Printf("serving on %s", *listen)
	log.Fatal(http.ListenAndServe(*listen, registry.New()))
}
