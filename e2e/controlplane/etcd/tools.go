//go:build tools

// Package tools pins the etcd server command built by scripts/build-controlplane.sh.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
)
