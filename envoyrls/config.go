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
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"gopkg.in/yaml.v3"

	"github.com/sluicelabs/sluice"
)

// Config is a loaded set of domains, one per file. It is immutable once
// loaded, so a server swaps whole Configs on reload.
type Config struct {
	domains map[string]*Domain
	// warnings are what loading accepted but an operator should hear of,
	// such as a mapping key written twice.
	warnings []string
}

// Warnings returns what loading accepted but an operator should hear of
// (each naming its file and line), in file order.
func (c *Config) Warnings() []string {
	if c == nil {
		return nil
	}
	return c.warnings
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
	// File is the file the domain was loaded from (the first one, when
	// MergeDomains spreads it over several).
	File string
	// Warnings are what its file(s) said that was accepted with a caveat.
	Warnings []string
	// AllOrNothing makes one check over the limits of all of a request's
	// descriptors, so a request denied by one descriptor consumes nothing in
	// the others.
	AllOrNothing bool
	// FailureMode is the domain's default failure policy; "" returns an
	// UNAVAILABLE error to Envoy when the store cannot answer, as
	// envoyproxy/ratelimit does, leaving the decision to Envoy's
	// failure_mode_deny.
	FailureMode sluice.FailureMode
	// Counting is how the domain's hits count (the YAML's counting);
	// "" leaves it to Options.Counting.
	Counting Counting
	root     *node
}

// node is one descriptor entry of the configuration tree.
type node struct {
	key, value string
	// kind tells how the entry matches a request entry's value.
	kind matchKind
	// glob is a wildcard value split at its '*'s, each matching any run of
	// characters, as in envoyproxy/ratelimit.
	glob []string
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
	// QuotaMode (envoyproxy/ratelimit's quota_mode) keeps the descriptor's
	// own OVER_LIMIT status, but the request is over the limit on its
	// account only when every quota-mode descriptor of it is.
	QuotaMode bool
	// Metadata is returned in the response's dynamic metadata when the
	// request passed this rule (with Options.DynamicMetadata).
	Metadata *structpb.Struct
	// DetailedMetric (envoyproxy/ratelimit's detailed_metric) counts the
	// rule's stats under the request's keys and values
	// ("domain.key_value.key2_value2"), not under the rule's key.
	DetailedMetric bool
	// Limit is what the store checks; its Capacity is 0 for a rule of
	// requests_per_unit: 0, which denies everything without a store call.
	Limit           sluice.Limit
	RequestsPerUnit uint32
	Unit            rlspb.RateLimitResponse_RateLimit_Unit
	UnitMultiplier  uint32
	FailureMode     sluice.FailureMode
	// Plans (a Sluice extension) are the descriptor's named limit sets, by
	// plan name: each a Rule like this one but for its limits. A request
	// picks one with a sluice_plan entry; the engine checks the rule with
	// that plan (check.Query.Plan), and the plan's Rule is what the
	// descriptor's status reports.
	Plans map[string]*Rule
	// Also are the further limits of a descriptor with several
	// (rate_limits, a Sluice extension): the request passes only if every
	// one allows, checked in one store call, and a deny by one consumes
	// nothing in the others. Each holds its Limit and its unit; the rest of
	// the rule (name, replaces, shadow, failure mode) is this one's.
	Also []*Rule
}

// limits are every limit the rule checks: its own, then Also's.
func (r *Rule) limits() []sluice.Limit {
	out := []sluice.Limit{r.Limit}
	for _, a := range r.Also {
		out = append(out, a.Limit)
	}
	return out
}

// enginePlans are r's plans as the engine checks them, nil without any.
func (r *Rule) enginePlans() sluice.Plans {
	if len(r.Plans) == 0 {
		return nil
	}
	ps := make(sluice.Plans, len(r.Plans))
	for name, p := range r.Plans {
		ps[name] = p.limits()
	}
	return ps
}

// neverFits returns the rule (r, or one of Also) whose limit can never hold
// cost, or nil.
func (r *Rule) neverFits(cost int64) *Rule {
	if cost > r.Limit.Capacity {
		return r
	}
	for _, a := range r.Also {
		if cost > a.Limit.Capacity {
			return a
		}
	}
	return nil
}

// shown is the rule (r, or one of Also) whose limit is named limit: the one
// a descriptor's status reports.
func (r *Rule) shown(limit string) *Rule {
	for _, a := range r.Also {
		if a.Limit.Name == limit {
			return a
		}
	}
	return r
}

// The YAML schema: envoyproxy/ratelimit's, plus Sluice's extensions
// (algorithm, burst, unit_multiplier, failure_mode, all_or_nothing, lease).
type yamlDomain struct {
	Domain       string           `yaml:"domain"`
	Descriptors  []yamlDescriptor `yaml:"descriptors"`
	AllOrNothing bool             `yaml:"all_or_nothing"`
	FailureMode  string           `yaml:"failure_mode"`
	Counting     string           `yaml:"counting"`
}

type yamlDescriptor struct {
	Key            string           `yaml:"key"`
	Value          string           `yaml:"value"`
	RateLimit      *yamlRateLimit   `yaml:"rate_limit"`
	RateLimits     []yamlRateLimit  `yaml:"rate_limits"`
	Descriptors    []yamlDescriptor `yaml:"descriptors"`
	ShadowMode     bool             `yaml:"shadow_mode"`
	QuotaMode      bool             `yaml:"quota_mode"`
	DetailedMetric bool             `yaml:"detailed_metric"`
	ValueToMetric  bool             `yaml:"value_to_metric"`
	ShareThreshold bool             `yaml:"share_threshold"`
	// Metadata is free-form: no field of it is checked.
	Metadata yaml.Node `yaml:"metadata"`
	// Plans (a Sluice extension) are named limit sets a request picks with
	// a sluice_plan entry, in place of the descriptor's own rate_limit(s).
	Plans map[string]yamlPlan `yaml:"plans"`
	// line is where the descriptor starts, for errors.
	line int
}

// yamlPlan is one plan's limits, written as a descriptor's are.
type yamlPlan struct {
	RateLimit  *yamlRateLimit  `yaml:"rate_limit"`
	RateLimits []yamlRateLimit `yaml:"rate_limits"`
}

// UnmarshalYAML records the descriptor's line, so an invalid rule is named
// by file and line.
func (d *yamlDescriptor) UnmarshalYAML(n *yaml.Node) error {
	type plain yamlDescriptor
	if err := n.Decode((*plain)(d)); err != nil {
		return err
	}
	d.line = n.Line
	return nil
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
	// Lease "auto" lets the limit be served from quota leases while a key
	// is hot (see sluice.Limit.Lease).
	Lease string `yaml:"lease"`
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
// errors and warnings.
//
// A mapping key written twice is accepted, the last one winning, as
// envoyproxy/ratelimit (YAML v2) does; each such key is reported in the
// domain's Warnings with its line. Anything else out of place (an unknown
// field, a value of the wrong type, an invalid rule) is an error naming the
// file and line.
func ParseDomain(file string, data []byte) (*Domain, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if len(doc.Content) == 0 {
		return nil, fmt.Errorf("%s: the file is empty; it needs a domain and descriptors", file)
	}
	var warnings []string
	dropRepeatedKeys(file, doc.Content[0], &warnings)
	if err := checkFields(doc.Content[0], reflect.TypeOf(yamlDomain{})); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var y yamlDomain
	if err := doc.Content[0].Decode(&y); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if y.Domain == "" {
		return nil, fmt.Errorf("%s: the domain is missing or empty", file)
	}
	d := &Domain{Name: y.Domain, File: file, AllOrNothing: y.AllOrNothing, Warnings: warnings}
	mode, err := parseFailureMode(y.FailureMode)
	if err != nil {
		return nil, fmt.Errorf("%s: domain %q: %w", file, y.Domain, err)
	}
	d.FailureMode = mode
	if d.Counting, err = parseCounting(y.Counting); err != nil {
		return nil, fmt.Errorf("%s: domain %q: %w", file, y.Domain, err)
	}
	if d.AllOrNothing && d.Counting == CountingEnvoy {
		return nil, fmt.Errorf("%s: domain %q: all_or_nothing checks a request's descriptors together and consumes nothing when one denies, which is counting: strict; remove counting: envoy or all_or_nothing", file, y.Domain)
	}
	d.root = &node{}
	if err := addDescriptors(d.root, y.Descriptors, d); err != nil {
		return nil, fmt.Errorf("%s: domain %q: %w", file, y.Domain, err)
	}
	return d, nil
}

// dropRepeatedKeys removes every pair of a mapping whose key the same
// mapping repeats further down, so the last one wins, and notes each.
// Merge keys and aliases are left to the decoder.
func dropRepeatedKeys(file string, n *yaml.Node, warnings *[]string) {
	if n.Kind == yaml.MappingNode {
		last := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			last[n.Content[i].Value] = i
		}
		kept := n.Content[:0:0]
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if j := last[k.Value]; j != i {
				*warnings = append(*warnings, fmt.Sprintf("%s:%d: key %q is written again at line %d; the last one wins, as in envoyproxy/ratelimit", file, k.Line, k.Value, n.Content[j].Line))
				continue
			}
			kept = append(kept, n.Content[i], n.Content[i+1])
		}
		n.Content = kept
	}
	for _, c := range n.Content {
		dropRepeatedKeys(file, c, warnings)
	}
}

// checkFields refuses a mapping key that the schema type t does not have,
// naming its line: a misspelt field would otherwise be silently ignored.
func checkFields(n *yaml.Node, t reflect.Type) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	switch {
	case t == reflect.TypeOf(yaml.Node{}):
		// Free-form.
	case t.Kind() == reflect.Map && n.Kind == yaml.MappingNode:
		for i := 1; i < len(n.Content); i += 2 {
			if err := checkFields(n.Content[i], t.Elem()); err != nil {
				return err
			}
		}
	case t.Kind() == reflect.Slice && n.Kind == yaml.SequenceNode:
		for _, c := range n.Content {
			if err := checkFields(c, t.Elem()); err != nil {
				return err
			}
		}
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		fields := map[string]reflect.Type{}
		for i := range t.NumField() {
			f := t.Field(i)
			if tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); tag != "" && tag != "-" {
				fields[tag] = f.Type
			}
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Tag == "!!merge" {
				// "<<: *anchor" brings another mapping's fields here.
				if err := checkFields(n.Content[i+1], reflect.SliceOf(t)); err != nil {
					return err
				}
				if err := checkFields(n.Content[i+1], t); err != nil {
					return err
				}
				continue
			}
			ft, ok := fields[k.Value]
			if !ok {
				return fmt.Errorf("line %d: field %s is not one of the %s fields", k.Line, k.Value, schemaName(t))
			}
			if err := checkFields(n.Content[i+1], ft); err != nil {
				return err
			}
		}
	}
	// Anything else is left to the decoder, which names its line.
	return nil
}

func schemaName(t reflect.Type) string {
	switch t {
	case reflect.TypeOf(yamlDomain{}):
		return "file's"
	case reflect.TypeOf(yamlDescriptor{}):
		return "descriptor's"
	case reflect.TypeOf(yamlRateLimit{}):
		return "rate_limit's"
	case reflect.TypeOf(yamlPlan{}):
		return "plan's"
	}
	return "replaces entry's"
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
			return fmt.Errorf("line %d: a descriptor %s has no key", yd.line, where)
		}
		n := &node{key: yd.Key, value: yd.Value, shadow: yd.ShadowMode, shareThreshold: yd.ShareThreshold}
		segment := escapePath(yd.Key)
		switch {
		case yd.Value == "":
			n.kind = matchKeyOnly
		case strings.Contains(yd.Value, "*"):
			// A '*' anywhere matches any run of characters, as in
			// envoyproxy/ratelimit; the path keeps the pattern, so a
			// trailing "foo*" keeps the counters it always had.
			n.kind = matchWildcard
			n.glob = strings.Split(yd.Value, "*")
			parts := make([]string, len(n.glob))
			for i, p := range n.glob {
				parts[i] = escapePath(p)
			}
			segment += "=" + strings.Join(parts, "*")
		default:
			segment += "=" + escapePath(yd.Value)
		}
		if yd.ShareThreshold && n.kind != matchWildcard {
			return fmt.Errorf("line %d: descriptor %s: share_threshold applies only to a wildcard value such as \"foo*\"", yd.line, segment)
		}
		n.path = segment
		if parent.path != "" {
			n.path = parent.path + "." + segment
		}
		if err := parent.add(n); err != nil {
			return fmt.Errorf("line %d: %w", yd.line, err)
		}
		if yd.RateLimit != nil && yd.RateLimits != nil {
			return fmt.Errorf("line %d: descriptor %s: rate_limit and rate_limits both give its limits; use rate_limits alone for several", yd.line, n.path)
		}
		if len(yd.RateLimits) > 0 {
			yd.RateLimit = &yd.RateLimits[0]
		} else if yd.RateLimits != nil {
			return fmt.Errorf("line %d: descriptor %s: rate_limits is empty", yd.line, n.path)
		}
		if yd.RateLimit != nil {
			r, err := newRule(n, yd.RateLimit, d)
			if err != nil {
				return fmt.Errorf("line %d: descriptor %s: %w", yd.line, n.path, err)
			}
			if len(yd.RateLimits) > 1 {
				if err := addAlso(r, n, yd.RateLimits, d); err != nil {
					return fmt.Errorf("line %d: descriptor %s: rate_limits: %w", yd.line, n.path, err)
				}
			}
			r.QuotaMode = yd.QuotaMode
			r.DetailedMetric = yd.DetailedMetric
			md, err := parseMetadata(&yd.Metadata)
			if err != nil {
				return fmt.Errorf("line %d: descriptor %s: metadata: %w", yd.line, n.path, err)
			}
			r.Metadata = md
			if err := addPlans(r, n, yd.Plans, d); err != nil {
				return fmt.Errorf("line %d: descriptor %s: %w", yd.line, n.path, err)
			}
			n.rule = r
		} else if yd.Plans != nil {
			return fmt.Errorf("line %d: descriptor %s: plans replace a descriptor's own limits, so it needs a rate_limit (or rate_limits) too: the limits of requests that name no plan", yd.line, n.path)
		}
		if err := addDescriptors(n, yd.Descriptors, d); err != nil {
			return err
		}
	}
	return nil
}

// parseMetadata turns a descriptor's metadata mapping into the struct
// returned as dynamic metadata; nil when there is none. Keys are taken as
// written, dates stay text and yes/no/on/off/y/n are booleans, as
// envoyproxy/ratelimit (YAML 1.1) reads them.
func parseMetadata(n *yaml.Node) (*structpb.Struct, error) {
	if n.Kind == 0 || n.Tag == "!!null" {
		return nil, nil
	}
	v, err := metadataValue(n)
	if err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("it must be a mapping of names to values (line %d)", n.Line)
	}
	if len(m) == 0 {
		return nil, nil
	}
	return structpb.NewStruct(m)
}

func metadataValue(n *yaml.Node) (any, error) {
	switch n.Kind {
	case yaml.AliasNode:
		return metadataValue(n.Alias)
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			v, err := metadataValue(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			m[n.Content[i].Value] = v
		}
		return m, nil
	case yaml.SequenceNode:
		l := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := metadataValue(c)
			if err != nil {
				return nil, err
			}
			l = append(l, v)
		}
		return l, nil
	}
	if n.Tag == "!!timestamp" {
		return n.Value, nil
	}
	if b, ok := yaml11Bools[n.Value]; ok && n.Style == 0 && n.Tag == "!!str" {
		return b, nil
	}
	var v any
	if err := n.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// yaml11Bools are the plain words YAML 1.1, and so envoyproxy/ratelimit's
// parser, reads as booleans where YAML 1.2 reads text.
var yaml11Bools = map[string]bool{
	"y": true, "Y": true, "yes": true, "Yes": true, "YES": true, "on": true, "On": true, "ON": true,
	"n": false, "N": false, "no": false, "No": false, "NO": false, "off": false, "Off": false, "OFF": false,
}

// globMatch reports whether value matches a wildcard split at its '*'s:
// it starts with the first part, ends with the last, and holds the others in
// order between them, without overlap.
func globMatch(parts []string, value string) bool {
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
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
		// As in envoyproxy/ratelimit: unlimited wins over a
		// requests_per_unit, but a unit says the author meant a limit.
		if y.Unit != "" || y.UnitMultiplier != nil || y.Algorithm != "" || y.Burst != nil {
			return nil, errors.New("an unlimited rate_limit must not also set unit, unit_multiplier, algorithm or burst")
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
	r.Unit = unitEnum[strings.ToLower(y.Unit)]
	if y.RequestsPerUnit != nil {
		// Without one, 0, as in envoyproxy/ratelimit: every request is
		// over the limit.
		r.RequestsPerUnit = *y.RequestsPerUnit
	}
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
	if y.Lease != "" && y.Lease != sluice.LeaseAuto {
		return nil, fmt.Errorf("rate_limit lease must be \"auto\" or absent, got %q", y.Lease)
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
	r.Limit.Lease = y.Lease
	if err := r.Limit.Validate(); err != nil {
		return nil, fmt.Errorf("rate_limit: %w", err)
	}
	return r, nil
}

// addAlso gives r, made from the first of ys, the limits of the others.
// The first entry names the rule (name, replaces, failure_mode); every entry
// is a real limit, each counting its own window.
func addAlso(r *Rule, n *node, ys []yamlRateLimit, d *Domain) error {
	seen := map[string]bool{}
	for i := range ys {
		y := &ys[i]
		switch {
		case y.Unlimited:
			return fmt.Errorf("entry %d is unlimited: a descriptor with several limits has no unlimited one", i+1)
		case y.RequestsPerUnit == nil || *y.RequestsPerUnit == 0:
			return fmt.Errorf("entry %d has no requests_per_unit (or 0, which would deny everything): each of several limits needs one", i+1)
		case i > 0 && (y.Name != "" || len(y.Replaces) > 0 || y.FailureMode != ""):
			return fmt.Errorf("entry %d sets name, replaces or failure_mode, which belong to the first entry: they are the descriptor's, not one limit's", i+1)
		}
		a := r
		if i > 0 {
			var err error
			if a, err = newRule(n, y, d); err != nil {
				return fmt.Errorf("entry %d: %w", i+1, err)
			}
			if a.UnitMultiplier > 1 {
				a.Limit.Name = fmt.Sprintf("per_%d_%s", a.UnitMultiplier, strings.ToLower(y.Unit))
			}
			a.Name = r.Name // for the status's current_limit
			r.Also = append(r.Also, a)
		} else if a.UnitMultiplier > 1 {
			a.Limit.Name = fmt.Sprintf("per_%d_%s", a.UnitMultiplier, strings.ToLower(y.Unit))
		}
		if seen[a.Limit.Name] {
			return fmt.Errorf("entry %d counts %s like another entry: give each its own unit or unit_multiplier", i+1, strings.ReplaceAll(a.Limit.Name, "_", " "))
		}
		seen[a.Limit.Name] = true
	}
	return nil
}

// addPlans gives r the plans of its descriptor: each a rule like r (its
// name, replaces, shadow and failure mode are the descriptor's) with the
// plan's limits. A plan's limit of the same name as one of r's (per_minute,
// per_day...) counts on the same counter, as plans do on every face.
func addPlans(r *Rule, n *node, plans map[string]yamlPlan, d *Domain) error {
	if plans == nil {
		return nil
	}
	if len(plans) == 0 {
		return errors.New("plans is empty; give each plan a name and a rate_limit, or remove plans")
	}
	if len(plans) > sluice.MaxPlans {
		return fmt.Errorf("plans has %d plans; at most %d are allowed", len(plans), sluice.MaxPlans)
	}
	r.Plans = make(map[string]*Rule, len(plans))
	for _, name := range sortedKeys(plans) {
		yp := plans[name]
		if err := sluice.PlanName(name).Validate(); err != nil {
			return fmt.Errorf("plan %q: %w", name, err)
		}
		ys := yp.RateLimits
		switch {
		case yp.RateLimit != nil && yp.RateLimits != nil:
			return fmt.Errorf("plan %q: rate_limit and rate_limits both give its limits; use rate_limits alone for several", name)
		case yp.RateLimit != nil:
			ys = []yamlRateLimit{*yp.RateLimit}
		case len(ys) == 0:
			return fmt.Errorf("plan %q has no limits: give it a rate_limit or rate_limits", name)
		}
		for i := range ys {
			y := &ys[i]
			switch {
			case y.Unlimited:
				return fmt.Errorf("plan %q: entry %d is unlimited; a plan's limits each need a requests_per_unit above 0", name, i+1)
			case y.RequestsPerUnit == nil || *y.RequestsPerUnit == 0:
				return fmt.Errorf("plan %q: entry %d has no requests_per_unit (or 0); a plan's limits each need one above 0", name, i+1)
			case y.Name != "" || len(y.Replaces) > 0 || y.FailureMode != "":
				return fmt.Errorf("plan %q: entry %d sets name, replaces or failure_mode, which belong to the descriptor's own rate_limit, not to a plan", name, i+1)
			}
		}
		p, err := newRule(n, &ys[0], d)
		if err != nil {
			return fmt.Errorf("plan %q: %w", name, err)
		}
		if len(ys) > 1 {
			if err := addAlso(p, n, ys, d); err != nil {
				return fmt.Errorf("plan %q: rate_limits: %w", name, err)
			}
		}
		p.Name, p.Replaces, p.Shadow, p.FailureMode = r.Name, r.Replaces, r.Shadow, r.FailureMode
		for _, a := range p.Also {
			a.Name = r.Name
		}
		p.QuotaMode, p.DetailedMetric, p.Metadata = r.QuotaMode, r.DetailedMetric, r.Metadata
		r.Plans[name] = p
	}
	return r.enginePlans().Validate()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
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

// LoadOptions say how a configuration directory is read, as
// envoyproxy/ratelimit's settings do.
type LoadOptions struct {
	// MergeDomains lets several files define one domain, their top-level
	// descriptors together (MERGE_DOMAIN_CONFIG); without it a domain
	// defined twice is an error.
	MergeDomains bool
	// IgnoreDotfiles skips files and directories whose names start with a
	// dot (RUNTIME_IGNOREDOTFILES), such as editors' swap files.
	IgnoreDotfiles bool
}

// LoadDir loads dir as Load does with the default options.
func LoadDir(dir string) (*Config, error) { return Load(dir, LoadOptions{}) }

// Load loads every file under dir, recursively and whatever its extension,
// as envoyproxy/ratelimit's runtime loader (goruntime) does: dotfiles too,
// unless opts.IgnoreDotfiles. Each file holds one domain; a domain defined in
// two files is an error unless opts.MergeDomains. A file reached twice
// (Kubernetes mounts a ConfigMap's files as symbolic links into a dot
// directory that holds them too) is read once.
func Load(dir string, opts LoadOptions) (*Config, error) {
	files, warnings, err := configFiles(dir, opts.IgnoreDotfiles)
	if err != nil {
		return nil, err
	}
	cfg := &Config{domains: map[string]*Domain{}, warnings: warnings}
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
		cfg.warnings = append(cfg.warnings, d.Warnings...)
		if err := cfg.add(d, opts.MergeDomains); err != nil {
			errs = append(errs, err)
		}
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
		if err := cfg.add(d, false); err != nil {
			return nil, err
		}
		cfg.warnings = append(cfg.warnings, d.Warnings...)
	}
	return cfg, nil
}

// add adds a parsed domain, or with merge, its top-level descriptors to the
// domain of the same name, as envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG
// does: a top-level descriptor defined in both is an error.
func (c *Config) add(d *Domain, merge bool) error {
	prev := c.domains[d.Name]
	if prev == nil {
		c.domains[d.Name] = d
		return nil
	}
	if !merge {
		return fmt.Errorf("%s: domain %q is already defined in %s; each domain belongs in one file (or merge them with --envoy-merge-domains)", d.File, d.Name, prev.File)
	}
	if prev.AllOrNothing != d.AllOrNothing || prev.FailureMode != d.FailureMode || prev.Counting != d.Counting {
		return fmt.Errorf("%s: domain %q is also defined in %s with another all_or_nothing, failure_mode or counting; the files of one domain must agree on them", d.File, d.Name, prev.File)
	}
	var children []*node
	for _, n := range d.root.exact {
		children = append(children, n)
	}
	for _, n := range d.root.keyOnly {
		children = append(children, n)
	}
	children = append(children, d.root.wildcard...)
	for _, n := range children {
		if err := prev.root.add(n); err != nil {
			return fmt.Errorf("%s: domain %q (merged with %s): %w", d.File, d.Name, prev.File, err)
		}
	}
	prev.Warnings = append(prev.Warnings, d.Warnings...)
	return nil
}

// configFiles lists the files under dir, recursively, sorted. Symbolic links
// to files are followed; links to directories are not (as goruntime's walk),
// and each is reported in warnings.
func configFiles(dir string, ignoreDotfiles bool) (files, warnings []string, err error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("read Envoy rate limit configuration directory: %w", err)
	}
	if !st.IsDir() {
		return nil, nil, fmt.Errorf("read Envoy rate limit configuration directory: %s is not a directory", dir)
	}
	root := dir
	if lst, err := os.Lstat(dir); err == nil && lst.Mode()&os.ModeSymlink != 0 {
		if root, err = filepath.EvalSymlinks(dir); err != nil {
			return nil, nil, fmt.Errorf("read Envoy rate limit configuration directory: %w", err)
		}
	}
	rootReal, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, nil, fmt.Errorf("read Envoy rate limit configuration directory: %w", err)
	}
	var seen []os.FileInfo
	err = filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("read Envoy rate limit configuration directory: %w", err)
		}
		if path == root {
			return nil
		}
		if ignoreDotfiles && strings.HasPrefix(e.Name(), ".") {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if e.IsDir() {
			return nil
		}
		if e.Type()&os.ModeSymlink != 0 {
			target, err := os.Stat(path)
			switch {
			case err != nil:
				warnings = append(warnings, fmt.Sprintf("%s: skipped: a symbolic link to nothing readable (%v)", path, err))
				return nil
			case target.IsDir():
				// Kubernetes' ..data link leads to a directory walked
				// anyway: only a link out of the tree is news.
				if real, err := filepath.EvalSymlinks(path); err == nil && strings.HasPrefix(real, rootReal+string(filepath.Separator)) {
					return nil
				}
				warnings = append(warnings, fmt.Sprintf("%s: skipped: a symbolic link to a directory, which is not followed", path))
				return nil
			}
		} else if !e.Type().IsRegular() {
			return nil
		}
		info, err := os.Stat(path)
		if err != nil {
			return fmt.Errorf("read Envoy rate limit configuration directory: %w", err)
		}
		for _, s := range seen {
			if os.SameFile(s, info) {
				return nil
			}
		}
		seen = append(seen, info)
		files = append(files, path)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return files, warnings, nil
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
