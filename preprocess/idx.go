package preprocess

import (
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/trainflow/trainflow/internal/idx"
)

// FormatIDX reads images and labels in the IDX files of MNIST and
// Fashion-MNIST (plain or gzip). A split's input files come in pairs: an
// images file whose name holds "images-idx3" (N×rows×cols bytes) and the
// labels file of the same name with "labels-idx1" (N bytes), e.g.
// train-images-idx3-ubyte.gz and train-labels-idx1-ubyte.gz, listed in
// any order. The schema has two columns: a float_vector of length
// rows×cols that receives the pixels (0–255, row-major), and the label, a
// string column of a classifier that receives label_vocab[b] for label
// byte b (the decimal digits when label_vocab is empty; a byte beyond
// label_vocab is a bad row, "unknown_label"). A record's "line" in bad
// records and errors is its 1-based index in the file.
const FormatIDX = "idx"

// Names that tell images files from labels files.
const (
	idxImages = "images-idx3"
	idxLabels = "labels-idx1"
)

// validateIDX checks the shape of a schema of format idx.
func (s *Schema) validateIDX() error {
	if len(s.Columns) != 2 || len(s.Crosses) != 0 || s.Header {
		return fmt.Errorf("%w: format idx needs exactly two columns (a float_vector image and the label), no crosses and no header", ErrSchema)
	}
	vec := s.idxVector()
	if vec < 0 || s.Columns[1-vec].Name != s.Label {
		return fmt.Errorf("%w: format idx needs a float_vector column and the label column", ErrSchema)
	}
	if s.LabelKind == LabelRegression {
		return fmt.Errorf("%w: format idx needs a class label (binary or multiclass)", ErrSchema)
	}
	return nil
}

// idxVector returns the index of the float_vector column, or -1.
func (s *Schema) idxVector() int {
	for i, c := range s.Columns {
		if c.Type == TypeFloatVector && c.Name != s.Label {
			return i
		}
	}
	return -1
}

// IDXPairs splits the input files of one split into images files and
// their labels files (labels[i] goes with images[i]), matched by name
// (either may be gzip-compressed, ".gz").
func IDXPairs(files []string) (images, labels []string, err error) {
	byName := map[string]string{}
	for _, f := range files {
		base := strings.TrimSuffix(filepath.Base(f), ".gz")
		switch {
		case strings.Contains(base, idxImages):
			images = append(images, f)
		case strings.Contains(base, idxLabels):
			if byName[base] != "" {
				return nil, nil, fmt.Errorf("%w: labels file %s is listed twice", ErrRequest, base)
			}
			byName[base] = f
		default:
			return nil, nil, fmt.Errorf("%w: input %s: an IDX input's name holds %q or %q", ErrRequest, f, idxImages, idxLabels)
		}
	}
	if len(images) != len(byName) {
		return nil, nil, fmt.Errorf("%w: %d images files and %d labels files: list each images file with its labels file", ErrRequest, len(images), len(byName))
	}
	for _, f := range images {
		want := strings.Replace(strings.TrimSuffix(filepath.Base(f), ".gz"), idxImages, idxLabels, 1)
		l := byName[want]
		if l == "" {
			return nil, nil, fmt.Errorf("%w: images file %s has no labels file %s[.gz] beside it", ErrRequest, f, want)
		}
		labels = append(labels, l)
	}
	return images, labels, nil
}

// checkIDX checks the pairs of IDX inputs: headers readable, the images
// as wide as the vector column, as many labels as images.
func (s *Schema) checkIDX(files []string) error {
	images, labels, err := IDXPairs(files)
	if err != nil {
		return err
	}
	width := s.Columns[s.idxVector()].Length
	for i, f := range images {
		id, err := idx.ReadDims(f)
		if err != nil {
			return fmt.Errorf("%w: input %w", ErrRequest, err)
		}
		ld, err := idx.ReadDims(labels[i])
		if err != nil {
			return fmt.Errorf("%w: input %w", ErrRequest, err)
		}
		if len(id) != 3 || len(ld) != 1 || id[0] != ld[0] {
			return fmt.Errorf("%w: input %s has dimensions %v and %s %v: want [N rows cols] and [N]", ErrRequest, f, id, labels[i], ld)
		}
		if id[1]*id[2] != width {
			return fmt.Errorf("%w: input %s holds %d×%d images, but column %q has length %d", ErrRequest, f, id[1], id[2], s.Columns[s.idxVector()].Name, width)
		}
	}
	return nil
}

// planIDXBlocks cuts the images of each pair into about n blocks in all;
// a block's Start and End are image indices, FirstLine is Start+1.
func planIDXBlocks(split string, files []string, n int) ([]Block, error) {
	images, labels, err := IDXPairs(files)
	if err != nil {
		return nil, err
	}
	if len(images) == 0 {
		return nil, fmt.Errorf("plan %s blocks: no input files", split)
	}
	counts := make([]int64, len(images))
	var total int64
	for i, f := range images {
		d, err := idx.ReadDims(f)
		if err != nil {
			return nil, fmt.Errorf("plan %s blocks: %w", split, err)
		}
		if len(d) == 0 || d[0] == 0 {
			return nil, fmt.Errorf("plan %s blocks: %s holds no images", split, f)
		}
		counts[i], total = int64(d[0]), total+int64(d[0])
	}
	n = max(1, min(int64ToInt(total), n))
	per := (total + int64(n) - 1) / int64(n)
	var blocks []Block
	for i, f := range images {
		for start := int64(0); start < counts[i]; start += per {
			blocks = append(blocks, Block{Path: f, Labels: labels[i], Start: start, End: min(start+per, counts[i]), FirstLine: start + 1, Split: split})
		}
	}
	for i := range blocks {
		blocks[i].Index, blocks[i].Of = i, len(blocks)
	}
	return blocks, nil
}

// idxRows is the rows of an IDX block.
type idxRows struct {
	s          *Schema
	b          Block
	vec, label int
	width      int
	images     []byte
	labels     []byte
	order      []int64 // image indices in the order rows are produced
	buf        []float64
}

// inflated holds, by input path, the uncompressed copies plainIDX made.
var inflated = struct {
	sync.Mutex
	m map[string]*inflation
}{m: map[string]*inflation{}}

type inflation struct {
	once sync.Once
	path string
	h    idx.Header
	err  error
}

// plainIDX returns an uncompressed IDX file holding name's data, with its
// header: name itself when it is plain; a gzip file is inflated once per
// process into the temporary directory (the preprocess child's own, which
// the activity removes with it; RemoveInflated in process), reading no
// more than its header declares, and shared by every block that reads it.
// A block then reads only its own images (idx.ReadValues), where it used
// to inflate the whole file for each block.
func plainIDX(name string) (string, idx.Header, error) {
	h, err := idx.ReadHeader(name)
	if err != nil || !h.Gzip {
		return name, h, err
	}
	inflated.Lock()
	in := inflated.m[name]
	if in == nil {
		in = &inflation{}
		inflated.m[name] = in
	}
	inflated.Unlock()
	in.once.Do(func() {
		sum := sha256.Sum256([]byte(name))
		in.path = filepath.Join(os.TempDir(), fmt.Sprintf("trainflow-idx-%d-%x", os.Getpid(), sum[:8]))
		in.h, in.err = idx.Decompress(name, in.path)
	})
	return in.path, in.h, in.err
}

// RemoveInflated removes the uncompressed copies plainIDX made in this
// process.
func RemoveInflated() {
	inflated.Lock()
	defer inflated.Unlock()
	for name, in := range inflated.m {
		if in.path != "" {
			os.Remove(in.path)
		}
		delete(inflated.m, name)
	}
}

// idxRows reads the images and labels of block b: only the block's part
// of each file (a gzip file inflated once, see plainIDX).
func (s *Schema) idxRows(b Block) (*idxRows, error) {
	imPath, im, err := plainIDX(b.Path)
	if err != nil {
		return nil, fmt.Errorf("read block %s: %w", b.Path, err)
	}
	lbPath, lb, err := plainIDX(b.Labels)
	if err != nil {
		return nil, fmt.Errorf("read block %s: %w", b.Labels, err)
	}
	if len(im.Dims) != 3 || len(lb.Dims) != 1 || im.Dims[0] != lb.Dims[0] || int64(im.Dims[0]) < b.End || b.Start < 0 || b.Start > b.End {
		return nil, fmt.Errorf("%w: input %s has dimensions %v and %s %v: want [N rows cols] and [N], N ≥ %d", ErrRequest, b.Path, im.Dims, b.Labels, lb.Dims, b.End)
	}
	vec := s.idxVector()
	r := &idxRows{s: s, b: b, vec: vec, label: 1 - vec, width: im.Dims[1] * im.Dims[2]}
	if r.width != s.Columns[vec].Length {
		return nil, fmt.Errorf("%w: input %s holds %d×%d images, but column %q has length %d", ErrRequest, b.Path, im.Dims[1], im.Dims[2], s.Columns[vec].Name, s.Columns[vec].Length)
	}
	if r.images, err = idx.ReadValues(imPath, im, b.Start*int64(r.width), b.End*int64(r.width)); err != nil {
		return nil, fmt.Errorf("read block %s: %w", b.Path, err)
	}
	if r.labels, err = idx.ReadValues(lbPath, lb, b.Start, b.End); err != nil {
		return nil, fmt.Errorf("read block %s: %w", b.Labels, err)
	}
	r.order = make([]int64, b.End-b.Start)
	for i := range r.order {
		r.order[i] = int64(i)
	}
	r.buf = make([]float64, r.width)
	return r, nil
}

// shuffle permutes the rows with a PCG generator seeded by (seed, block),
// as shuffleLines does for text inputs.
func (r *idxRows) shuffle(seed uint64, block int) {
	rng := rand.New(rand.NewPCG(seed, uint64(block)))
	rng.Shuffle(len(r.order), func(i, j int) { r.order[i], r.order[j] = r.order[j], r.order[i] })
}

func (r *idxRows) len() int { return len(r.order) }

// parse fills dst with image k: its pixels in the vector column (the
// slice is reused by the next call) and its class name in the label.
func (r *idxRows) parse(k int, dst []Value) error {
	i := r.order[k]
	for j, p := range r.images[i*int64(r.width) : (i+1)*int64(r.width)] {
		r.buf[j] = float64(p)
	}
	dst[r.vec] = Value{Vec: r.buf}
	l := int(r.labels[i])
	name := strconv.Itoa(l)
	if vocab := r.s.LabelVocab; len(vocab) > 0 {
		if l >= len(vocab) {
			return &RowError{Reason: ReasonUnknownLabel, Column: r.s.Label, Detail: fmt.Sprintf("label byte %d has no class in label_vocab (%d classes)", l, len(vocab))}
		}
		name = vocab[l]
	}
	dst[r.label] = Value{Str: name}
	return nil
}

func (r *idxRows) where(k int) (int64, int64, string) {
	i := r.b.Start + r.order[k]
	return i + 1, i, fmt.Sprintf("image %d of %s", i, filepath.Base(r.b.Path))
}

// FashionMNISTClasses are Fashion-MNIST's class names, by label byte.
var FashionMNISTClasses = []string{"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"}

// MNISTClasses are MNIST's classes, the digits, by label byte.
var MNISTClasses = []string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}

// ImageSchema returns the schema of an MNIST-layout image dataset in IDX
// files: an "image" float_vector of 28×28 pixels scaled by 1/255 and a
// multiclass "label" with the given classes, in label-byte order.
func ImageSchema(classes []string) Schema {
	return Schema{
		Columns: []Column{
			{Name: "image", Type: TypeFloatVector, Length: 28 * 28, Treatment: Scale, Scale: 255},
			{Name: "label", Type: TypeString},
		},
		Label:      "label",
		LabelKind:  LabelMulticlass,
		LabelVocab: slices.Clone(classes),
		Format:     FormatIDX,
	}
}
