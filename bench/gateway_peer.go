package bench

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// The peer on the same work: nginx doing per request what the gateway
// does on the benchmark's predict path, in Lua inside nginx
// (lua-nginx-module, the architecture of OpenResty and of Kong, the
// most used API gateway built on nginx). nginx and HAProxy as plain
// proxies authenticate, validate, limit, count and sample nothing; this
// one does all of it, so the gateway's ratio against it compares the
// same work, and its own ratio against plain nginx is what that work
// costs the fastest proxy of the run (docs/gateway.md, "A peer doing
// the same work").
//
// Per request, as the gateway does for the benchmark's endpoint:
//   - the API key from `Authorization: Bearer`, looked up by its prefix
//     and checked by the SHA-256 of the whole key (OpenSSL's, through
//     LuaJIT's FFI, as Kong hashes), and the key's team against the
//     endpoint's;
//   - a request counter per key and one per endpoint, each a fixed
//     one-second window in a shared dictionary (Kong's local rate-limiting
//     policy), at limits never reached, as the gateway's buckets;
//   - the body read and decoded (lua-cjson) and every instance held to
//     the endpoint's schema (predictSchema: an object of exactly amount,
//     a number of at least 0, and country, a string of two characters);
//   - the version drawn 90/10 and the replica by least connections over
//     the version's two, which get the request at /predict;
//   - a request id to the replica and to the caller, X-Model-Version to
//     the caller;
//   - after the answer, a count per endpoint, version and status and a
//     latency bucket (in the worker, as nginx-lua-prometheus counts), and
//     1 % of the bodies queued for shipping.
//
// What it leaves out, each in the peer's favour: the gateway also
// publishes the sampled bodies and the statistics over NATS, bounds each
// replica's outstanding requests and answers problems as JSON with the
// request id; the peer's queue is drained by a timer and its statistics
// stay in the worker.

// errPeerModule is why the peer cannot run where nginx's Lua module or
// lua-cjson is missing.
var errPeerModule = errors.New("nginx's Lua module or lua-cjson is not installed (scripts/bench-proxies.sh installs libnginx-mod-http-lua and lua-cjson)")

// peerFiles are the files the peer's config names: nginx's modules,
// lua-cjson and OpenSSL's libcrypto, as Debian installs them.
type peerFiles struct {
	ndk, lua, cjson, crypto string
}

// findPeerFiles finds the peer's files, errPeerModule where one is
// missing.
func findPeerFiles() (peerFiles, error) {
	first := func(pattern string) string {
		m, _ := filepath.Glob(pattern)
		if len(m) == 0 {
			return ""
		}
		return m[0]
	}
	f := peerFiles{
		ndk:    first("/usr/lib/nginx/modules/ndk_http_module.so"),
		lua:    first("/usr/lib/nginx/modules/ngx_http_lua_module.so"),
		cjson:  first("/usr/lib/*/lua/5.1/cjson.so"),
		crypto: first("/usr/lib/*/libcrypto.so.3"),
	}
	if f.ndk == "" || f.lua == "" || f.cjson == "" || f.crypto == "" {
		return f, errPeerModule
	}
	return f, nil
}

// startPeer starts the peer with workers worker processes in dir/nginx_lua
// in front of the predict replicas, for the API key key, and returns it,
// its address and nginx's version.
func startPeer(dir, key string, replicas []string, workers int, pin bool) (*proc, string, string, error) {
	bin, err := proxyBin("nginx")
	if err != nil {
		return nil, "", "", err
	}
	files, err := findPeerFiles()
	if err != nil {
		return nil, "", "", err
	}
	p, addr, err := runProxy("nginx_lua", dir, workers, pin, func(pdir, addr string) (string, []string) {
		return peerConfig(files, pdir, addr, key, replicas, workers), nginxArgv(bin, pdir, filepath.Join(pdir, "proxy.conf"))
	})
	if err != nil {
		return nil, "", "", err
	}
	return p, addr, proxyVersion("nginx", bin), nil
}

// peerConfig is the peer's nginx config.
func peerConfig(f peerFiles, pdir, addr, key string, replicas []string, workers int) string {
	prefix, _, _ := strings.Cut(strings.TrimPrefix(key, "mpk_"), "_")
	prefix = "mpk_" + prefix
	sum := sha256.Sum256([]byte(key))
	var servers strings.Builder
	for _, r := range replicas {
		fmt.Fprintf(&servers, " server %s;", r)
	}
	location := `proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_set_header X-Request-Id $request_id;`
	return nginxConf(pdir, workers, []string{f.ndk, f.lua}, `  client_body_buffer_size 64k;
  client_max_body_size 64k;
  lua_package_cpath "`+filepath.Dir(f.cjson)+`/?.so;;";
  lua_shared_dict limits 16m;
  lua_shared_dict samples 16m;
  init_by_lua_block {
    local ffi = require "ffi"
    local nkeys = require "table.nkeys"
    local cjson = require "cjson.safe"
    ffi.cdef[[ unsigned char *SHA256(const unsigned char *d, size_t n, unsigned char *md); ]]
    local crypto = ffi.load("`+f.crypto+`")
    local md = ffi.new("unsigned char[32]")
    local function unhex(h) return (h:gsub("..", function(c) return string.char(tonumber(c, 16)) end)) end
    local keys = { ["`+prefix+`"] = { digest = unhex("`+hex.EncodeToString(sum[:])+`"), team = "bench" } }
    local endpoints = { ["`+predictEndpoint+`"] = { team = "bench", canary = 10, limit = 1e9 } }
    local limits, samples = ngx.shared.limits, ngx.shared.samples
    local function fail(status, title)
      ngx.status = status
      ngx.header["Content-Type"] = "application/problem+json"
      ngx.say('{"status":', status, ',"title":"', title, '"}')
      return ngx.exit(status)
    end
    local function valid(inst)
      if type(inst) ~= "table" or nkeys(inst) ~= 2 then return false end
      local a, c = inst.amount, inst.country
      return type(a) == "number" and a >= 0 and type(c) == "string" and #c == 2
    end
    function admit(name)
      local ep = endpoints[name]
      if not ep then return fail(404, "no such endpoint") end
      local h = ngx.var.http_authorization
      if not h or h:sub(1, 7) ~= "Bearer " then return fail(401, "unauthenticated") end
      local raw = h:sub(8)
      local prefix = raw:sub(1, `+fmt.Sprint(len(prefix))+`)
      local k = keys[prefix]
      if not k then return fail(401, "unauthenticated") end
      crypto.SHA256(raw, #raw, md)
      if ffi.string(md, 32) ~= k.digest then return fail(401, "unauthenticated") end
      if k.team ~= ep.team then return fail(403, "forbidden") end
      local sec = ngx.time()
      if (limits:incr("k" .. prefix .. sec, 1, 0, 2) or 0) > ep.limit then return fail(429, "rate limited") end
      if (limits:incr("e" .. name .. sec, 1, 0, 2) or 0) > ep.limit then return fail(429, "rate limited") end
      ngx.req.read_body()
      local body = ngx.req.get_body_data()
      if not body then return fail(400, "bad request") end
      local doc = cjson.decode(body)
      local insts = type(doc) == "table" and doc.instances
      if type(insts) ~= "table" or #insts == 0 then return fail(400, "invalid input") end
      for i = 1, #insts do
        if not valid(insts[i]) then return fail(400, "invalid input") end
      end
      local version = "stable"
      if math.random(100) <= ep.canary then version = "canary" end
      ngx.var.version = version
      if math.random() < 0.01 then ngx.ctx.sample = body end
    end
    local buckets = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10 }
    local counts = {}
    function record(name)
      local v = ngx.var.version
      if v == "" then return end
      local key = name .. "|" .. v .. "|" .. ngx.status
      counts[key] = (counts[key] or 0) + 1
      local d = ngx.now() - ngx.req.start_time()
      local b = #buckets + 1
      for i = 1, #buckets do if d <= buckets[i] then b = i break end end
      key = key .. "|" .. b
      counts[key] = (counts[key] or 0) + 1
      local s = ngx.ctx.sample
      if s then samples:rpush("q", s) end
    end
  }
  init_worker_by_lua_block {
    ngx.timer.every(1, function() local s = ngx.shared.samples; while s:lpop("q") do end end)
  }
  upstream stable { least_conn;`+servers.String()+` keepalive 1024; keepalive_requests 1000000; }
  upstream canary { least_conn;`+servers.String()+` keepalive 1024; keepalive_requests 1000000; }
  server {
    listen `+addr+`;
    location ~ ^/v1/endpoints/([A-Za-z0-9_.~-]+)/predict$ {
      set $version "";
      access_by_lua_block { admit(ngx.var[1]) }
      proxy_pass http://$version/predict;
      `+location+`
      add_header X-Request-Id $request_id always;
      add_header X-Model-Version $version always;
      log_by_lua_block { record(ngx.var[1]) }
    }
  }
`)
}
