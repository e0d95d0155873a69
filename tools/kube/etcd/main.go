// Command etcd is etcd's own server at the version tools/kube/go.mod pins,
// for the test clusters of internal/kubetest.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
