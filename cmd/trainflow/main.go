// Command trainflow trains and serves models on Temporal: the commands of
// package cli with the built-in model types. `trainflow help` lists them;
// a binary with model types of its own calls cli.Main the same way (see
// examples/custom_model).
package main

import (
	"os"

	"github.com/trainflow/trainflow/cli"
	"github.com/trainflow/trainflow/train"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], cli.Options{ModelTypes: train.Builtins()}))
}
