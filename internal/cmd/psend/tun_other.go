//go:build !linux

package main

import "errors"

type tunDev struct{}

func openTun(string) (*tunDev, error) { return nil, errors.New("tun devices are Linux only") }

func (d *tunDev) write([]byte) error { return nil }

func (d *tunDev) close() {}
