//go:build !linux

package fastpath

import "errors"

// MaxMapBytes: see mapmem.go.
const MaxMapBytes = 256 << 20

var errLinux = errors.New("the fast path needs Linux")

// KernelNeeds: see kernels.go.
func KernelNeeds() (string, error) { return "", errLinux }

// MapMemory: see mapmem.go.
func MapMemory(Spec) (uint64, error) { return 0, errLinux }
