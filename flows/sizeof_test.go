package flows

import "unsafe"

func sizeof[T any](v T) uintptr { return unsafe.Sizeof(v) }
