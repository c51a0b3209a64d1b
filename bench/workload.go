package bench

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/farmem/farmem/bench/generator"
)

//go:embed workloads/workload*
var builtinFS embed.FS

// ErrWorkload is wrapped by every error about a workload file or property.
var ErrWorkload = errors.New("bad workload")

// Limits on workload values, so that a file cannot ask for absurd allocations.
const (
	// MaxValueSize is the largest value (fieldcount*fieldlength, or valuesize) a workload may ask for.
	MaxValueSize = 64 << 20
	// MaxScanLength is the largest maxscanlength.
	MaxScanLength = 1 << 20
	// maxFileSize bounds a workload file.
	maxFileSize = 1 << 20
)

// Op is a kind of operation of a workload.
type Op uint8

// The operations, in YCSB's order of its operation chooser.
const (
	OpRead Op = iota
	OpUpdate
	OpInsert
	OpScan
	OpReadModifyWrite
	NumOps
)

var opNames = [NumOps]string{"read", "update", "insert", "scan", "readmodifywrite"}

// String returns the op's name as in its workload property ("read" for readproportion).
func (o Op) String() string {
	if o < NumOps {
		return opNames[o]
	}
	return "op(" + strconv.Itoa(int(o)) + ")"
}

// Distribution names a request distribution.
type Distribution string

// The request distributions (YCSB's requestdistribution). YCSB's exponential and sequential
// are not implemented.
const (
	DistUniform Distribution = "uniform"
	DistZipfian Distribution = "zipfian"
	DistLatest  Distribution = "latest"
	DistHotspot Distribution = "hotspot"
)

// Workload is a parsed YCSB core workload. Build one with Parse, ParseFile, Builtin or
// LoadWorkload, and change one with With (which validates again); the fields are for reading.
//
// Values are opaque byte strings of ValueSize() bytes (fieldcount fields of fieldlength bytes
// each, or valuesize if set): reads return a whole value, and updates and inserts write a whole
// value (YCSB's default writeallfields=false would write one field of a record; a key-value
// store has no fields).
type Workload struct {
	// Name is the builtin's letter or the file's base name.
	Name string

	RecordCount    int64 // recordcount: records loaded (default 1000)
	OperationCount int64 // operationcount: operations of a run phase by op count (default 1000)
	InsertStart    int64 // insertstart (default 0)
	InsertCount    int64 // insertcount (default recordcount - insertstart)

	// Proportions of the operations, indexed by Op (readproportion, updateproportion,
	// insertproportion, scanproportion, readmodifywriteproportion). They sum to 1.
	Proportion [NumOps]float64

	RequestDistribution Distribution // requestdistribution (default uniform)
	HotspotDataFraction float64      // hotspotdatafraction (default 0.2)
	HotspotOpnFraction  float64      // hotspotopnfraction (default 0.8)

	FieldCount              int    // fieldcount (default 10)
	FieldLength             int    // fieldlength (default 100)
	FieldLengthDistribution string // fieldlengthdistribution: constant (default), uniform or zipfian
	FixedValueSize          int    // valuesize (farmem's): a constant value size overriding the fields; 0 if unset

	MinScanLength          int    // minscanlength (default 1)
	MaxScanLength          int    // maxscanlength (default 1000)
	ScanLengthDistribution string // scanlengthdistribution: uniform (default) or zipfian

	OrderedInserts bool // insertorder=ordered (default hashed; ordered with keyformat=binary64)
	ZeroPadding    int  // zeropadding (default 1)

	// KeyFormat is keyformat (farmem's): string (default, YCSB's key names) or binary64 (the
	// 8-byte big-endian key number plus one, see generator.KeyBinary64). Binary64 keys are the
	// key numbers themselves, never their hashes, so inserts under binary64 are in key order:
	// insertorder defaults to ordered, and insertorder=hashed (or any zeropadding) with
	// binary64 is an error rather than a setting silently without effect.
	KeyFormat generator.KeyFormat

	props map[string]rawProp // as given (with their lines), for Properties and With
}

type propDef struct {
	def string // YCSB's default
	// loadTime: the property shapes what the load phase writes, so it cannot change between
	// points of a sweep over one loaded store.
	loadTime bool
	// ignored: accepted for compatibility with YCSB's files, with no effect here.
	ignored bool
}

// The properties a workload may set. Any other name is an error (a misspelt property would
// otherwise silently take its default).
var propDefs = map[string]propDef{
	"recordcount":                            {def: "1000", loadTime: true},
	"operationcount":                         {def: "1000"},
	"insertstart":                            {def: "0", loadTime: true},
	"insertcount":                            {loadTime: true},
	"readproportion":                         {def: "0.95"},
	"updateproportion":                       {def: "0.05"},
	"insertproportion":                       {def: "0"},
	"scanproportion":                         {def: "0"},
	"readmodifywriteproportion":              {def: "0"},
	"requestdistribution":                    {def: "uniform"},
	"hotspotdatafraction":                    {def: "0.2"},
	"hotspotopnfraction":                     {def: "0.8"},
	"fieldcount":                             {def: "10", loadTime: true},
	"fieldlength":                            {def: "100", loadTime: true},
	"fieldlengthdistribution":                {def: "constant", loadTime: true},
	"valuesize":                              {def: "0", loadTime: true},
	"minscanlength":                          {def: "1"},
	"maxscanlength":                          {def: "1000"},
	"scanlengthdistribution":                 {def: "uniform"},
	"insertorder":                            {def: "hashed", loadTime: true},
	"zeropadding":                            {def: "1", loadTime: true},
	"keyformat":                              {def: "string", loadTime: true},
	"workload":                               {ignored: true},
	"table":                                  {ignored: true},
	"readallfields":                          {def: "true", ignored: true},
	"writeallfields":                         {def: "false", ignored: true},
	"readallfieldsbyfieldname":               {def: "false", ignored: true},
	"fieldnameprefix":                        {def: "field", ignored: true},
	"dataintegrity":                          {def: "false", ignored: true},
	"measurementtype":                        {ignored: true},
	"histogram.buckets":                      {ignored: true},
	"timeseries.granularity":                 {ignored: true},
	"core_workload_insertion_retry_limit":    {ignored: true},
	"core_workload_insertion_retry_interval": {ignored: true},
}

var proportionProps = [NumOps]string{"readproportion", "updateproportion", "insertproportion",
	"scanproportion", "readmodifywriteproportion"}

// Builtins returns the names of the embedded workloads: "a" to "f", YCSB's core workloads.
func Builtins() []string {
	ents, _ := builtinFS.ReadDir("workloads")
	var names []string
	for _, e := range ents {
		names = append(names, strings.TrimPrefix(e.Name(), "workload"))
	}
	slices.Sort(names)
	return names
}

// Builtin returns an embedded workload by name: "a".."f" (or "workloada".."workloadf").
func Builtin(name string) (*Workload, error) {
	short := strings.TrimPrefix(strings.ToLower(name), "workload")
	data, err := builtinFS.ReadFile("workloads/workload" + short)
	if err != nil || short == "" {
		return nil, fmt.Errorf("bench: no builtin workload %q (have %s): %w", name,
			strings.Join(Builtins(), ", "), ErrWorkload)
	}
	return Parse(short, bytes.NewReader(data))
}

// BuiltinText returns the text of an embedded workload file.
func BuiltinText(name string) ([]byte, error) {
	short := strings.TrimPrefix(strings.ToLower(name), "workload")
	data, err := builtinFS.ReadFile("workloads/workload" + short)
	if err != nil || short == "" {
		return nil, fmt.Errorf("bench: no builtin workload %q: %w", name, ErrWorkload)
	}
	return data, nil
}

// ParseFile parses the workload file at path; its name is the file's base name.
func ParseFile(path string) (*Workload, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("bench: workload: %w", err)
	}
	defer f.Close()
	return Parse(filepath.Base(path), f)
}

// LoadWorkload returns the workload arg names: the file at path arg if one exists, else the
// builtin of that name.
func LoadWorkload(arg string) (*Workload, error) {
	if st, err := os.Stat(arg); err == nil && st.Mode().IsRegular() {
		return ParseFile(arg)
	}
	if strings.ContainsRune(arg, os.PathSeparator) {
		return nil, fmt.Errorf("bench: workload file %s: %w", arg, os.ErrNotExist)
	}
	return Builtin(arg)
}

type rawProp struct {
	value string
	line  int
}

// Parse reads a workload in YCSB's property-file format: one "name=value" (or "name: value",
// or "name value") a line, blank lines and lines starting with # or ! ignored, a trailing
// backslash continuing a line. A property given twice, an unknown property, or a value out of
// range is an error naming the line.
func Parse(name string, r io.Reader) (*Workload, error) {
	props, err := parseProps(name, r)
	if err != nil {
		return nil, err
	}
	return build(name, props)
}

func parseProps(name string, r io.Reader) (map[string]rawProp, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("bench: workload %s: %w", name, err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("bench: workload %s: larger than %d bytes: %w", name, maxFileSize, ErrWorkload)
	}
	props := map[string]rawProp{}
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		lineNo := i + 1
		line := strings.TrimRight(lines[i], "\r")
		line = strings.TrimLeft(line, " \t\f")
		if line == "" || line[0] == '#' || line[0] == '!' {
			continue
		}
		for continued(line) && i+1 < len(lines) {
			i++
			line = line[:len(line)-1] + strings.TrimLeft(strings.TrimRight(lines[i], "\r"), " \t\f")
		}
		if continued(line) {
			line = line[:len(line)-1]
		}
		key, value, ok := splitProp(line)
		if !ok {
			return nil, fmt.Errorf("bench: workload %s line %d: %q has no value (want name=value): %w",
				name, lineNo, truncate(line), ErrWorkload)
		}
		if prev, dup := props[key]; dup {
			return nil, fmt.Errorf("bench: workload %s line %d: %s given again (first on line %d): %w",
				name, lineNo, truncate(key), prev.line, ErrWorkload)
		}
		props[key] = rawProp{value: value, line: lineNo}
	}
	return props, nil
}

// continued reports whether line ends with an odd number of backslashes.
func continued(line string) bool {
	n := 0
	for i := len(line) - 1; i >= 0 && line[i] == '\\'; i-- {
		n++
	}
	return n%2 == 1
}

func splitProp(line string) (key, value string, ok bool) {
	i := strings.IndexAny(line, "=: \t\f")
	if i <= 0 {
		return "", "", false
	}
	key = line[:i]
	rest := strings.TrimLeft(line[i:], " \t\f")
	if line[i] == ' ' || line[i] == '\t' || line[i] == '\f' {
		// "name value" or "name = value"
		if rest != "" && (rest[0] == '=' || rest[0] == ':') {
			rest = rest[1:]
		}
	} else {
		rest = rest[1:]
	}
	return key, strings.TrimSpace(rest), true
}

func truncate(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}

// build validates props and makes the workload.
func build(name string, props map[string]rawProp) (*Workload, error) {
	loc := func(k string, p rawProp) string {
		if p.line == 0 {
			return fmt.Sprintf("bench: workload %s: %s (as set)", name, truncate(k))
		}
		return fmt.Sprintf("bench: workload %s line %d: %s", name, p.line, truncate(k))
	}
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if _, ok := propDefs[k]; !ok {
			return nil, fmt.Errorf("%s: unknown property: %w", loc(k, props[k]), ErrWorkload)
		}
	}
	w := &Workload{Name: name, props: props}
	get := func(k string) (string, string) {
		if p, ok := props[k]; ok {
			return p.value, loc(k, p)
		}
		return propDefs[k].def, fmt.Sprintf("bench: workload %s: %s (default)", name, k)
	}
	bad := func(where, format string, args ...any) error {
		return fmt.Errorf("%s: %s: %w", where, fmt.Sprintf(format, args...), ErrWorkload)
	}
	intIn := func(k string, lo, hi int64) (int64, error) {
		s, where := get(k)
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, bad(where, "%q is not an integer", truncate(s))
		}
		if v < lo || v > hi {
			return 0, bad(where, "%d is not in [%d, %d]", v, lo, hi)
		}
		return v, nil
	}
	fraction := func(k string) (float64, error) {
		s, where := get(k)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(v) {
			return 0, bad(where, "%q is not a number", truncate(s))
		}
		if v < 0 || v > 1 {
			return 0, bad(where, "%v is not in [0, 1]", v)
		}
		return v, nil
	}
	oneOf := func(k string, allowed ...string) (string, error) {
		s, where := get(k)
		if !slices.Contains(allowed, s) {
			return "", bad(where, "%q is not one of %s", truncate(s), strings.Join(allowed, ", "))
		}
		return s, nil
	}
	boolean := func(k string) error {
		s, where := get(k)
		if _, err := strconv.ParseBool(s); err != nil {
			return bad(where, "%q is not true or false", truncate(s))
		}
		return nil
	}
	var err error
	const maxCount = 1 << 40
	if w.RecordCount, err = intIn("recordcount", 1, maxCount); err != nil {
		return nil, err
	}
	if w.OperationCount, err = intIn("operationcount", 0, maxCount); err != nil {
		return nil, err
	}
	if w.InsertStart, err = intIn("insertstart", 0, w.RecordCount-1); err != nil {
		return nil, err
	}
	if _, ok := props["insertcount"]; ok {
		if w.InsertCount, err = intIn("insertcount", 1, w.RecordCount-w.InsertStart); err != nil {
			return nil, fmt.Errorf("%w (insertstart+insertcount must not exceed recordcount)", err)
		}
	} else {
		w.InsertCount = w.RecordCount - w.InsertStart
	}
	sum := 0.0
	for op, k := range proportionProps {
		if w.Proportion[op], err = fraction(k); err != nil {
			return nil, err
		}
		sum += w.Proportion[op]
	}
	if math.Abs(sum-1) > 1e-6 {
		var parts []string
		for op, k := range proportionProps {
			if w.Proportion[op] != 0 {
				parts = append(parts, fmt.Sprintf("%s=%v", k, w.Proportion[op]))
			}
		}
		return nil, fmt.Errorf("bench: workload %s: the operation proportions sum to %v, not 1 (%s; unset ones default to readproportion=0.95, updateproportion=0.05): %w",
			name, sum, strings.Join(parts, " "), ErrWorkload)
	}
	dist, err := oneOf("requestdistribution", "uniform", "zipfian", "latest", "hotspot")
	if err != nil {
		return nil, err
	}
	w.RequestDistribution = Distribution(dist)
	if w.HotspotDataFraction, err = fraction("hotspotdatafraction"); err != nil {
		return nil, err
	}
	if w.HotspotOpnFraction, err = fraction("hotspotopnfraction"); err != nil {
		return nil, err
	}
	if w.RequestDistribution == DistHotspot {
		hot := int64(float64(w.InsertCount) * w.HotspotDataFraction)
		if hot == 0 || hot == w.InsertCount {
			_, where := get("hotspotdatafraction")
			return nil, bad(where, "%v of %d records leaves the hot or the cold set empty",
				w.HotspotDataFraction, w.InsertCount)
		}
	}
	fc, err := intIn("fieldcount", 1, MaxValueSize)
	if err != nil {
		return nil, err
	}
	fl, err := intIn("fieldlength", 1, MaxValueSize)
	if err != nil {
		return nil, err
	}
	w.FieldCount, w.FieldLength = int(fc), int(fl)
	vs, err := intIn("valuesize", 0, MaxValueSize)
	if err != nil {
		return nil, err
	}
	w.FixedValueSize = int(vs)
	if vs == 0 && fc*fl > MaxValueSize {
		_, where := get("fieldlength")
		return nil, bad(where, "fieldcount*fieldlength = %d is more than %d", fc*fl, MaxValueSize)
	}
	if w.FieldLengthDistribution, err = oneOf("fieldlengthdistribution", "constant", "uniform", "zipfian"); err != nil {
		return nil, err
	}
	minScan, err := intIn("minscanlength", 1, MaxScanLength)
	if err != nil {
		return nil, err
	}
	maxScan, err := intIn("maxscanlength", 1, MaxScanLength)
	if err != nil {
		return nil, err
	}
	if maxScan < minScan {
		_, where := get("maxscanlength")
		return nil, bad(where, "%d is less than minscanlength %d", maxScan, minScan)
	}
	w.MinScanLength, w.MaxScanLength = int(minScan), int(maxScan)
	if w.ScanLengthDistribution, err = oneOf("scanlengthdistribution", "uniform", "zipfian"); err != nil {
		return nil, err
	}
	var formats []string
	for _, f := range generator.KeyFormats() {
		formats = append(formats, string(f))
	}
	format, err := oneOf("keyformat", formats...)
	if err != nil {
		return nil, err
	}
	w.KeyFormat = generator.KeyFormat(format)
	order, err := oneOf("insertorder", "hashed", "ordered")
	if err != nil {
		return nil, err
	}
	if w.KeyFormat == generator.KeyBinary64 {
		if p, given := props["insertorder"]; given && order == "hashed" {
			return nil, bad(loc("insertorder", p), "binary64 keys are the key numbers themselves (not their hashes), so inserts are in key order: leave insertorder unset or set it to ordered")
		}
		order = "ordered"
		if p, given := props["zeropadding"]; given {
			return nil, bad(loc("zeropadding", p), "binary64 keys have no digits to pad: leave zeropadding unset")
		}
	}
	w.OrderedInserts = order == "ordered"
	zp, err := intIn("zeropadding", 1, 64)
	if err != nil {
		return nil, err
	}
	w.ZeroPadding = int(zp)
	for _, k := range []string{"readallfields", "writeallfields", "readallfieldsbyfieldname", "dataintegrity"} {
		if err := boolean(k); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// With returns a copy of w with the given properties set (validated as in a file).
func (w *Workload) With(props map[string]string) (*Workload, error) {
	all := maps.Clone(w.props)
	for k, v := range props {
		all[k] = rawProp{value: v}
	}
	return build(w.Name, all)
}

// Properties returns the properties the workload was given (not its defaults), for reports and
// for writing it back as a file.
func (w *Workload) Properties() map[string]string {
	m := make(map[string]string, len(w.props))
	for k, p := range w.props {
		m[k] = p.value
	}
	return m
}

// Effective returns every property with its effective value (given or default), leaving out
// those that have no effect here.
func (w *Workload) Effective() map[string]string {
	m := map[string]string{}
	for k, d := range propDefs {
		if d.ignored {
			continue
		}
		if p, ok := w.props[k]; ok {
			m[k] = p.value
		} else if d.def != "" {
			m[k] = d.def
		}
	}
	m["insertcount"] = strconv.FormatInt(w.InsertCount, 10)
	if w.OrderedInserts {
		m["insertorder"] = "ordered"
	}
	return m
}

// WriteTo writes the workload in the property-file format Parse reads.
func (w *Workload) WriteTo(out io.Writer) (int64, error) {
	keys := make([]string, 0, len(w.props))
	for k := range w.props {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b bytes.Buffer
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, w.props[k].value)
	}
	return b.WriteTo(out)
}

// LoadTimeProperty reports whether a property shapes the loaded data (record count, value
// sizes, key format), so that changing it needs a freshly loaded store.
func LoadTimeProperty(name string) bool { return propDefs[name].loadTime }

// KnownProperty reports whether name is a property a workload may set.
func KnownProperty(name string) bool { _, ok := propDefs[name]; return ok }

// ValueSize returns the largest value the workload writes: valuesize if set, else
// fieldcount*fieldlength.
func (w *Workload) ValueSize() int {
	if w.FixedValueSize > 0 {
		return w.FixedValueSize
	}
	return w.FieldCount * w.FieldLength
}

// AppendKey appends the key of key number keynum to dst, in the workload's key format: YCSB's
// key name (generator.AppendKey, with zeropadding and insertorder) or the binary64 encoding
// (generator.AppendBinary64Key). It fails only for a binary64 key number outside
// 0..generator.MaxBinary64KeyNum, which no workload reaches (at most 2^40 records, plus one
// key number per insert).
func (w *Workload) AppendKey(dst []byte, keynum int64) ([]byte, error) {
	if w.KeyFormat == generator.KeyBinary64 {
		return generator.AppendBinary64Key(dst, keynum)
	}
	return generator.AppendKey(dst, keynum, w.ZeroPadding, w.OrderedInserts), nil
}

// NeedsScan reports whether the workload scans (and so needs an ordered index).
func (w *Workload) NeedsScan() bool { return w.Proportion[OpScan] > 0 }

// String describes the workload in one line.
func (w *Workload) String() string {
	var parts []string
	for op := range NumOps {
		if w.Proportion[op] > 0 {
			parts = append(parts, fmt.Sprintf("%s %g%%", op, w.Proportion[op]*100))
		}
	}
	return fmt.Sprintf("workload %s: %s, %s, %d records of %d B", w.Name, strings.Join(parts, " "),
		w.RequestDistribution, w.RecordCount, w.ValueSize())
}
