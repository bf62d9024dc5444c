package main

import "github.com/spf13/cobra"

// newGendocsCmd is the hidden "packetshaper gendocs": placeholder.
func newGendocsCmd(c *cli) *cobra.Command {
	return &cobra.Command{Use: "gendocs", Hidden: true, Args: noArgs}
}
