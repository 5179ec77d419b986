package rendezvous

import (
	"cmp"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"tpurun/internal/failure"
)

// confKeys are the Conf keys understood, sorted: tpurun's, and torchrun's (c10d and etcd) that ParseConf keeps.
var confKeys = []string{"cacert", "cert", "close_timeout", "heartbeat", "heartbeat_timeout", "hosts", "is_host", "join_timeout", "keep_alive_interval", "keep_alive_max_attempt",
	"key", "last_call_timeout", "linger", "port", "prefix", "progress_interval", "protocol", "read_timeout", "store_type", "use_libuv"}

// confAliases are torchrun's keys that mean one of tpurun's: its etcd backend's "timeout" is the join timeout,
// etcd_prefix the key prefix. (heartbeat_timeout, the time after which a silent node is lost, is SilentBeats
// heartbeats: see heartbeat.)
var confAliases = map[string]string{"timeout": "join_timeout", "etcd_prefix": "prefix"}

// noEffectConf are torchrun's keys that are accepted and do nothing under tpurun (its messages have their own
// bounds, and it has no TCPStore to tune).
var noEffectConf = []string{"close_timeout", "read_timeout", "store_type", "use_libuv"}

// ParseConf parses options given as comma-separated key=value pairs ("join_timeout=60,is_host=true"), as torchrun
// takes --rdzv-conf: white space and quotes around the whole list, a key or a value are dropped (a shell that kept
// them, or a test that passes "'timeout=5'"), torchrun's aliases become tpurun's keys (timeout: join_timeout,
// etcd_prefix: prefix; the tpurun key wins when both are given), and is_host takes
// torchrun's booleans (yes, no, t, f, ...). Unknown keys are refused later, by New or CheckConf.
func ParseConf(s string) (map[string]string, error) {
	out := map[string]string{}
	s = unquote(s)
	if s == "" {
		return out, nil
	}
	aliased := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		k, v = unquote(k), unquote(v)
		if !ok || k == "" {
			return nil, configError(failure.RendezvousOption, kv, "not key=value")
		}
		_, dup := out[k]
		if to, ok := confAliases[k]; ok {
			_, dup = aliased[to+"\x00"+k]
			aliased[to+"\x00"+k] = v
		} else {
			out[k] = v
		}
		if dup {
			return nil, configError(failure.RendezvousOption, kv, fmt.Sprintf("key %q given twice", k))
		}
	}
	for key, v := range aliased {
		if to, _, _ := strings.Cut(key, "\x00"); out[to] == "" {
			out[to] = v
		}
	}
	if v, ok := out["is_host"]; ok {
		out["is_host"] = torchBool(v)
	}
	return out, nil
}

// CheckConf refuses a key that neither tpurun nor torchrun knows, naming the known keys.
func CheckConf(conf map[string]string) error { return checkConfKeys(conf) }

// unquote drops white space and quotes around s.
func unquote(s string) string {
	return strings.TrimSpace(strings.Trim(strings.TrimSpace(s), `'"`))
}

// torchBool maps torchrun's booleans (RendezvousParameters.get_as_bool) to "true" and "false"; anything else is
// kept for the backend to refuse.
func torchBool(v string) string {
	switch strings.ToLower(v) {
	case "1", "true", "t", "yes", "y", "on":
		return "true"
	case "0", "false", "f", "no", "n", "off":
		return "false"
	}
	return v
}

// withDefaultPort is endpoint with the backend's default port added where a host is given without one, as
// torchrun's parse_rendezvous_endpoint does: DefaultPort (tcp, c10d, static), 2379 for each etcd endpoint. An
// IPv6 address may be given bare or in brackets.
func withDefaultPort(backend, endpoint string) string {
	port := strconv.Itoa(DefaultPort)
	if b, err := Lookup(backend); err == nil {
		port = strconv.Itoa(b.Port())
	}
	parts := strings.Split(endpoint, ",")
	for i, ep := range parts {
		ep = strings.TrimSpace(ep)
		if ep == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(ep); err == nil {
			continue
		}
		host := strings.TrimSuffix(strings.TrimPrefix(ep, "["), "]")
		if strings.Contains(host, ":") && net.ParseIP(host) == nil {
			continue // neither a host nor an IPv6 address: left for the endpoint check to refuse
		}
		parts[i] = net.JoinHostPort(host, port)
	}
	return strings.Join(parts, ",")
}

// checkConfKeys refuses an unknown key.
func checkConfKeys(conf map[string]string) error {
	for k, v := range conf {
		i := sort.SearchStrings(confKeys, k)
		if i == len(confKeys) || confKeys[i] != k {
			return configError(failure.RendezvousOption, k+"="+v, "unknown key; known keys: "+strings.Join(confKeys, ", "))
		}
	}
	return nil
}

// confDuration reads a duration given as seconds ("30", "0.5") or a Go duration ("30s").
func confDuration(conf map[string]string, key string, def time.Duration) (time.Duration, error) {
	v, ok := conf[key]
	if !ok {
		return def, nil
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil && f > 0 && f < 1e6 {
		return time.Duration(f * float64(time.Second)), nil
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return d, nil
	}
	return 0, configError(failure.RendezvousOption, key+"="+v, "not a positive duration (seconds, or like 30s)")
}

// heartbeat is the heartbeat: the heartbeat option, else the one whose silence limit (SilentBeats heartbeats) is
// torchrun's heartbeat_timeout, else torchrun's keep_alive_interval x keep_alive_max_attempt (5 s x 3 by default
// there: a heartbeat of 5 s) when either is given, else def.
func heartbeat(conf map[string]string, def time.Duration) (time.Duration, error) {
	_, i := conf["keep_alive_interval"]
	_, n := conf["keep_alive_max_attempt"]
	_, limit := conf["heartbeat_timeout"]
	if _, hb := conf["heartbeat"]; hb || !i && !n && !limit {
		return confDuration(conf, "heartbeat", def)
	}
	if limit {
		d, err := confDuration(conf, "heartbeat_timeout", def)
		return d / SilentBeats, err
	}
	interval, err := confDuration(conf, "keep_alive_interval", 5*time.Second)
	if err != nil {
		return 0, err
	}
	attempts, err := strconv.Atoi(cmp.Or(conf["keep_alive_max_attempt"], "3"))
	if err != nil || attempts < 1 || attempts > 1000 {
		return 0, configError(failure.RendezvousOption, "keep_alive_max_attempt="+conf["keep_alive_max_attempt"], "not a whole number from 1")
	}
	return interval * time.Duration(attempts) / SilentBeats, nil
}

// torchrunConf applies what torchrun's settings mean beyond the options' values: an endpoint without a port gets
// the default one, and the keys that have no effect here are logged.
func torchrunConf(cfg *Config) {
	for _, k := range noEffectConf {
		if v, ok := cfg.Conf[k]; ok {
			cfg.Logger.Info("torchrun rendezvous option accepted with no effect under tpurun", zap.String("option", k+"="+v))
		}
	}
	cfg.Endpoint = withDefaultPort(cfg.Backend, cfg.Endpoint)
}
