// Package envoyrls is a drop-in replacement for envoyproxy/ratelimit: the
// Envoy rate limit service (envoy.service.ratelimit.v3.RateLimitService) over
// gRPC, its POST /json HTTP form, and a loader for envoyproxy/ratelimit's YAML
// configuration files.
//
// A rule configured as in envoyproxy/ratelimit behaves as it does there: a
// fixed window aligned to the unit. Extension fields in the same YAML give
// rolling windows (algorithm: sliding_window | token_bucket, burst),
// all-or-nothing checks across a request's descriptors (all_or_nothing: true on
// the domain) and a failure policy (failure_mode). One deliberate difference:
// a denied request consumes no quota, where envoyproxy/ratelimit counts it.
package envoyrls

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"gopkg.in/yaml.v3"

	"github.com/sluicelabs/sluice"
)

// Config is a loaded set of domains, one per file. It is immutable once
// loaded, so a server swaps whole Configs on reload.
type Config struct {
	domains map[string]*Domain
}

// Domain returns the named domain, or nil.
func (c *Config) Domain(name string) *Domain {
	if c == nil {
		return nil
	}
	return c.domains[name]
}

// Domains returns the names of the loaded domains, sorted.
func (c *Config) Domains() []string {
	names := make([]string, 0, len(c.domains))
	for name := range c.domains {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Domain is one configuration file: a domain and its descriptor tree.
type Domain struct {
	Name string
	// File is the file the domain was loaded from.
	File string
	// AllOrNothing makes one check over the limits of all of a request's
	// descriptors, so a request denied by one descriptor consumes nothing in
	// the others.
	AllOrNothing bool
	// FailureMode is the domain's default failure policy; "" returns an
	// UNAVAILABLE error to Envoy when the store cannot answer, as
	// envoyproxy/ratelimit does, leaving the decision to Envoy's
	// failure_mode_deny.
	FailureMode sluice.FailureMode
	root        *node
}

// node is one descriptor entry of the configuration tree.
type node struct {
	key, value string
	// kind tells how the entry matches a request entry's value.
	kind matchKind
	// path is the rule's identity: the entries from the root to here.
	path string
	// shareThreshold makes every value matched by a wildcard share one
	// counter.
	shareThreshold bool
	shadow         bool
	rule           *Rule

	exact    map[entry]*node
	wildcard []*node          // in file order; the first match wins
	keyOnly  map[string]*node // key
}

// entry is a key and value. A struct, not a joined string: keys and values
// may hold any byte, so no separator keeps two different entries apart.
type entry struct{ key, value string }

type matchKind int

const (
	matchExact matchKind = iota
	matchWildcard
	matchKeyOnly
)

// Rule is the rate_limit of one descriptor.
type Rule struct {
	// Path names the descriptor: its entries from the root, such as
	// "database=users.user_id"; it is the rule of the counters' keys and of
	// the metrics.
	Path string
	// Name is the rate_limit's name, the target of other rules' replaces.
	Name     string
	Replaces []string
	// Unlimited rules are never counted.
	Unlimited bool
	Shadow    bool
	// Limit is what the store checks; its Capacity is 0 for a rule of
	// requests_per_unit: 0, which denies everything without a store call.
	Limit           sluice.Limit
	RequestsPerUnit uint32
	Unit            rlspb.RateLimitResponse_RateLimit_Unit
	UnitMultiplier  uint32
	FailureMode     sluice.FailureMode
}

// The YAML schema: envoyproxy/ratelimit's, plus Sluice's extensions
// (algorithm, burst, failure_mode, all_or_nothing).
type yamlDomain struct {
	Domain       string           `yaml:"domain"`
	Descriptors  []yamlDescriptor `yaml:"descriptors"`
	AllOrNothing bool             `yaml:"all_or_nothing"`
	FailureMode  string           `yaml:"failure_mode"`
}

type yamlDescriptor struct {
	Key            string           `yaml:"key"`
	Value          string           `yaml:"value"`
	RateLimit      *yamlRateLimit   `yaml:"rate_limit"`
	Descriptors    []yamlDescriptor `yaml:"descriptors"`
	ShadowMode     bool             `yaml:"shadow_mode"`
	DetailedMetric bool             `yaml:"detailed_metric"`
	ValueToMetric  bool             `yaml:"value_to_metric"`
	ShareThreshold bool             `yaml:"share_threshold"`
}

type yamlRateLimit struct {
	RequestsPerUnit *uint32        `yaml:"requests_per_unit"`
	Unit            string         `yaml:"unit"`
	UnitMultiplier  *uint32        `yaml:"unit_multiplier"`
	Unlimited       bool           `yaml:"unlimited"`
	Name            string         `yaml:"name"`
	Replaces        []yamlReplaces `yaml:"replaces"`
	Algorithm       string         `yaml:"algorithm"`
	Burst           *int64         `yaml:"burst"`
	FailureMode     string         `yaml:"failure_mode"`
}

type yamlReplaces struct {
	Name string `yaml:"name"`
}

// unitSeconds is each unit's length as envoyproxy/ratelimit counts it
// (utils.UnitToDivider): a month is 30 days and a year 365 days, and windows
// are aligned to the Unix epoch.
var unitSeconds = map[string]int64{
	"second": 1,
	"minute": 60,
	"hour":   3600,
	"day":    86400,
	"week":   7 * 86400,
	"month":  30 * 86400,
	"year":   365 * 86400,
}

var unitEnum = map[string]rlspb.RateLimitResponse_RateLimit_Unit{
	"second": rlspb.RateLimitResponse_RateLimit_SECOND,
	"minute": rlspb.RateLimitResponse_RateLimit_MINUTE,
	"hour":   rlspb.RateLimitResponse_RateLimit_HOUR,
	"day":    rlspb.RateLimitResponse_RateLimit_DAY,
	"week":   rlspb.RateLimitResponse_RateLimit_WEEK,
	"month":  rlspb.RateLimitResponse_RateLimit_MONTH,
	"year":   rlspb.RateLimitResponse_RateLimit_YEAR,
}

// maxFileBytes bounds one configuration file.
const maxFileBytes = 4 << 20

// ParseDomain parses one configuration file's contents; file names it in
// errors.
func ParseDomain(file string, data []byte) (*Domain, error) {
	var y yamlDomain
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&y); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: the file is empty; it needs a domain and descriptors", file)
		}
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if y.Domain == "" {
		return nil, fmt.Errorf("%s: the domain is missing or empty", file)
	}
	d := &Domain{Name: y.Domain, File: file, AllOrNothing: y.AllOrNothing}
	mode, err := parseFailureMode(y.FailureMode)
	if err != nil {
		return nil, fmt.Errorf("%s: domain %q: %w", file, y.Domain, err)
	}
	d.FailureMode = mode
	d.root = &node{}
	if err := addDescriptors(d.root, y.Descriptors, d); err != nil {
		return nil, fmt.Errorf("%s: domain %q: %w", file, y.Domain, err)
	}
	return d, nil
}

func parseFailureMode(s string) (sluice.FailureMode, error) {
	m := sluice.FailureMode(s)
	if s == "" || m.Valid() {
		return m, nil
	}
	return "", fmt.Errorf("failure_mode %q is not one of closed, open, local", s)
}

func addDescriptors(parent *node, descs []yamlDescriptor, d *Domain) error {
	for _, yd := range descs {
		if yd.Key == "" {
			where := "at the top level"
			if parent.path != "" {
				where = "under " + parent.path
			}
			return fmt.Errorf("a descriptor %s has no key", where)
		}
		n := &node{key: yd.Key, value: yd.Value, shadow: yd.ShadowMode, shareThreshold: yd.ShareThreshold}
		segment := escapePath(yd.Key)
		switch {
		case yd.Value == "":
			n.kind = matchKeyOnly
		case strings.HasSuffix(yd.Value, "*"):
			n.kind = matchWildcard
			n.value = strings.TrimSuffix(yd.Value, "*")
			segment += "=" + escapePath(n.value) + "*"
		default:
			segment += "=" + escapePath(yd.Value)
		}
		if yd.ShareThreshold && n.kind != matchWildcard {
			return fmt.Errorf("descriptor %s: share_threshold applies only to a wildcard value such as \"foo*\"", segment)
		}
		n.path = segment
		if parent.path != "" {
			n.path = parent.path + "." + segment
		}
		if err := parent.add(n); err != nil {
			return err
		}
		if yd.RateLimit != nil {
			r, err := newRule(n, yd.RateLimit, d)
			if err != nil {
				return fmt.Errorf("descriptor %s: %w", n.path, err)
			}
			n.rule = r
		}
		if err := addDescriptors(n, yd.Descriptors, d); err != nil {
			return err
		}
	}
	return nil
}

func (p *node) add(n *node) error {
	dup := false
	switch n.kind {
	case matchExact:
		if p.exact == nil {
			p.exact = map[entry]*node{}
		}
		k := entry{n.key, n.value}
		dup = p.exact[k] != nil
		p.exact[k] = n
	case matchWildcard:
		for _, w := range p.wildcard {
			dup = dup || (w.key == n.key && w.value == n.value)
		}
		p.wildcard = append(p.wildcard, n)
	case matchKeyOnly:
		if p.keyOnly == nil {
			p.keyOnly = map[string]*node{}
		}
		dup = p.keyOnly[n.key] != nil
		p.keyOnly[n.key] = n
	}
	if dup {
		return fmt.Errorf("descriptor %s is defined twice", n.path)
	}
	return nil
}

func newRule(n *node, y *yamlRateLimit, d *Domain) (*Rule, error) {
	r := &Rule{Path: n.path, Name: y.Name, Shadow: n.shadow, Unlimited: y.Unlimited}
	for _, rep := range y.Replaces {
		if rep.Name == "" {
			return nil, errors.New("an entry of replaces has no name")
		}
		if rep.Name == y.Name {
			return nil, fmt.Errorf("rate_limit %q replaces itself", y.Name)
		}
		r.Replaces = append(r.Replaces, rep.Name)
	}
	mode, err := parseFailureMode(y.FailureMode)
	if err != nil {
		return nil, err
	}
	r.FailureMode = mode
	if mode == "" {
		r.FailureMode = d.FailureMode
	}
	if y.Unlimited {
		if y.Unit != "" || y.RequestsPerUnit != nil || y.Algorithm != "" || y.Burst != nil {
			return nil, errors.New("an unlimited rate_limit must not also set unit, requests_per_unit, algorithm or burst")
		}
		return r, nil
	}
	secs, ok := unitSeconds[strings.ToLower(y.Unit)]
	if !ok {
		if y.Unit == "" {
			return nil, errors.New("rate_limit needs a unit (second, minute, hour, day, week, month or year) or unlimited: true")
		}
		return nil, fmt.Errorf("rate_limit unit %q is not one of second, minute, hour, day, week, month, year", y.Unit)
	}
	if y.RequestsPerUnit == nil {
		return nil, errors.New("rate_limit needs requests_per_unit")
	}
	r.Unit = unitEnum[strings.ToLower(y.Unit)]
	r.RequestsPerUnit = *y.RequestsPerUnit
	r.UnitMultiplier = 1
	if y.UnitMultiplier != nil {
		if *y.UnitMultiplier == 0 {
			return nil, errors.New("rate_limit unit_multiplier must be at least 1")
		}
		r.UnitMultiplier = *y.UnitMultiplier
	}
	// A Duration holds about 292 years; a longer window would wrap around
	// to a wrong, possibly negative, one.
	if secs*int64(r.UnitMultiplier) > math.MaxInt64/int64(time.Second) {
		return nil, fmt.Errorf("rate_limit unit_multiplier %d makes the window too long: %d %ss is more than 292 years", r.UnitMultiplier, r.UnitMultiplier, strings.ToLower(y.Unit))
	}
	window := time.Duration(secs) * time.Duration(r.UnitMultiplier) * time.Second
	limitName := "per_" + strings.ToLower(y.Unit)
	algorithm := sluice.Algorithm(y.Algorithm)
	if algorithm == "" {
		algorithm = sluice.AlgorithmFixedWindow
	}
	if !algorithm.Valid() {
		return nil, fmt.Errorf("rate_limit algorithm %q is not one of fixed_window, sliding_window, token_bucket", y.Algorithm)
	}
	if y.Burst != nil && algorithm != sluice.AlgorithmTokenBucket {
		return nil, fmt.Errorf("rate_limit burst applies only to algorithm: token_bucket, not %s", algorithm)
	}
	if r.RequestsPerUnit == 0 {
		// envoyproxy/ratelimit accepts 0 and then denies every request; the
		// engine has no empty limit, so the server denies without a check.
		if algorithm == sluice.AlgorithmTokenBucket && y.Burst != nil {
			return nil, errors.New("rate_limit with requests_per_unit: 0 denies everything; it takes no burst")
		}
		r.Limit = sluice.Limit{Name: limitName, Algorithm: algorithm, Window: window}
		return r, nil
	}
	switch algorithm {
	case sluice.AlgorithmFixedWindow:
		r.Limit = sluice.FixedWindow(int64(r.RequestsPerUnit), window).Named(limitName)
	case sluice.AlgorithmSlidingWindow:
		r.Limit = sluice.SlidingWindow(int64(r.RequestsPerUnit), window).Named(limitName)
	case sluice.AlgorithmTokenBucket:
		capacity := int64(r.RequestsPerUnit)
		if y.Burst != nil {
			if *y.Burst <= 0 {
				return nil, fmt.Errorf("rate_limit burst must be a positive integer, got %d", *y.Burst)
			}
			capacity = *y.Burst
		}
		refill := float64(r.RequestsPerUnit) / window.Seconds()
		r.Limit = sluice.TokenBucket(capacity, refill).Named(limitName)
	}
	if err := r.Limit.Validate(); err != nil {
		return nil, fmt.Errorf("rate_limit: %w", err)
	}
	return r, nil
}

// escapePath percent-escapes the characters that structure a rule path, so
// two different descriptors never get the same path.
func escapePath(s string) string {
	if !strings.ContainsAny(s, "%.=*") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%', '.', '=', '*':
			b.WriteString("%" + strings.ToUpper(strconv.FormatInt(int64(c), 16)))
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// LoadDir loads every *.yaml and *.yml file of dir (not its subdirectories,
// and not hidden files such as editors' swap files or Kubernetes' ..data).
// Each file holds one domain; a domain defined in two files is an error.
func LoadDir(dir string) (*Config, error) {
	files, err := configFiles(dir)
	if err != nil {
		return nil, err
	}
	cfg := &Config{domains: map[string]*Domain{}}
	var errs []error
	for _, f := range files {
		data, err := readFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		d, err := ParseDomain(f, data)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if prev := cfg.domains[d.Name]; prev != nil {
			errs = append(errs, fmt.Errorf("%s: domain %q is already defined in %s; each domain belongs in one file", f, d.Name, prev.File))
			continue
		}
		cfg.domains[d.Name] = d
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return cfg, nil
}

// NewConfig builds a Config from parsed domains, as LoadDir does from files.
func NewConfig(domains ...*Domain) (*Config, error) {
	cfg := &Config{domains: map[string]*Domain{}}
	for _, d := range domains {
		if prev := cfg.domains[d.Name]; prev != nil {
			return nil, fmt.Errorf("%s: domain %q is already defined in %s; each domain belongs in one file", d.File, d.Name, prev.File)
		}
		cfg.domains[d.Name] = d
	}
	return cfg, nil
}

func configFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read Envoy rate limit configuration directory: %w", err)
	}
	var files []string
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		ext := strings.ToLower(filepath.Ext(name))
		if ext != ".yaml" && ext != ".yml" {
			continue
		}
		path := filepath.Join(dir, name)
		// Kubernetes mounts ConfigMap files as symlinks: follow them, but
		// skip directories.
		if st, err := os.Stat(path); err != nil || st.IsDir() {
			continue
		}
		files = append(files, path)
	}
	sort.Strings(files)
	return files, nil
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > maxFileBytes {
		return nil, fmt.Errorf("%s: the file is larger than %d MiB", path, maxFileBytes>>20)
	}
	return data, nil
}

// Rules returns every rule of the domain, each once.
func (d *Domain) Rules() []*Rule {
	var out []*Rule
	seen := map[*Rule]bool{}
	var walk func(n *node)
	walk = func(n *node) {
		if n == nil {
			return
		}
		if n.rule != nil && !seen[n.rule] {
			seen[n.rule] = true
			out = append(out, n.rule)
		}
		for _, c := range n.exact {
			walk(c)
		}
		for _, c := range n.wildcard {
			walk(c)
		}
		for _, c := range n.keyOnly {
			walk(c)
		}
	}
	walk(d.root)
	return out
}
