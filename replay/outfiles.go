package replay

import (
	"fmt"
	"io"
	"os"
)

// The files of a replay beside the engine: the captures' sizes, and the
// outputs (verdicts, accepted and dropped packets, the report), each
// created before anything is replayed.

// StatInputs opens each capture of names ("-": stdin, not opened), so that
// one that cannot be opened at all fails before anything is replayed or
// any output created (damage inside a capture is reported after the
// packets before it). It returns each one's size (-1: unknown) and the
// files' FileInfos, for CreateOutputs.
func StatInputs(names []string) ([]int64, []os.FileInfo, error) {
	sizes := make([]int64, len(names))
	var infos []os.FileInfo
	for i, name := range names {
		sizes[i] = -1
		if name == "-" {
			continue
		}
		f, err := os.Open(name)
		if err != nil {
			return nil, nil, err
		}
		if st, err := f.Stat(); err == nil {
			infos = append(infos, st)
			sizes[i] = st.Size()
		}
		f.Close()
	}
	return sizes, infos, nil
}

// OutFile is an output file: the flag that names it (for errors), its
// path ("": none) and where its writer goes.
type OutFile struct {
	Flag, Path string
	Dst        *io.Writer
}

// OverwriteError is CreateOutputs' error for an output that is also a
// capture to replay.
type OverwriteError struct{ Flag, Path string }

func (e *OverwriteError) Error() string {
	return fmt.Sprintf("%s %s is also a capture to replay: it would be overwritten", e.Flag, e.Path)
}

// CreateOutputs creates each output with a path and sets its Dst, in
// order; an output that is one of inputs is refused (OverwriteError)
// before it is created. It returns the files created, also on error.
func CreateOutputs(outs []OutFile, inputs []os.FileInfo) ([]*os.File, error) {
	var files []*os.File
	for _, o := range outs {
		if o.Path == "" {
			continue
		}
		if st, err := os.Stat(o.Path); err == nil {
			for _, in := range inputs {
				if os.SameFile(st, in) {
					return files, &OverwriteError{o.Flag, o.Path}
				}
			}
		}
		f, err := os.Create(o.Path)
		if err != nil {
			return files, fmt.Errorf("%s: %w", o.Flag, err)
		}
		files = append(files, f)
		*o.Dst = f
	}
	return files, nil
}
