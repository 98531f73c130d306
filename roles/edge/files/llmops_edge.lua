-- llmops.vllm edge: API keys, routing by model or path, token accounting for the audit log, response counters
-- per status class (/edge/metrics) and fault injection (edge_fault_injection, off by default).
-- The routing table comes from nginx.conf (init_by_lua_block), rendered from the edge_plan filter; the fault
-- injection from its own file (JSON, null for off), read when nginx starts or reloads.
local cjson = require "cjson.safe"
local ffi = require "ffi"

ffi.cdef [[unsigned char *SHA256(const unsigned char *d, size_t n, unsigned char *md);]]

local _M = {}
local conf = { models = {}, model_names = {}, instances = {}, api_keys = {}, api_paths = {} }
local api_paths = {}
local digest_buf = ffi.new("unsigned char[32]")
local TAIL = 4096
-- The counters live in this lua_shared_dict (nginx.conf): shared by the workers, kept over a reload.
local STATS = "llmops_edge_stats"
-- Status classes; "none": the client went away before any answer (status 0, logged as 000).
local CLASSES = { "1xx", "2xx", "3xx", "4xx", "5xx", "none" }
local FAULT_MESSAGE = "fault injected by the edge (edge_fault_injection)"

-- The fault file: a missing file or null is off.
local function read_fault(path)
  local file = io.open(path, "r")
  if not file then
    return nil
  end
  local text = file:read("*a")
  file:close()
  local fault, err = cjson.decode(text)
  if fault == nil then
    error("llmops edge: bad fault file " .. path .. ": " .. tostring(err))
  end
  if fault == cjson.null then
    return nil
  end
  return fault
end

function _M.configure(json, fault_file)
  local parsed, err = cjson.decode(json)
  if not parsed then
    error("llmops edge: bad routing table: " .. tostring(err))
  end
  conf = parsed
  conf.fault = read_fault(fault_file)
  api_paths = {}
  for _, path in ipairs(conf.api_paths) do
    api_paths[path] = true
  end
  if conf.default_model == cjson.null then
    conf.default_model = nil
  end
end

local function sha256_hex(text)
  ffi.C.SHA256(text, #text, digest_buf)
  local hex = {}
  for i = 0, 31 do
    hex[i + 1] = string.format("%02x", digest_buf[i])
  end
  return table.concat(hex)
end

-- An OpenAI-style error; the request goes no further.
local function reject(status, message, kind, extra_headers)
  ngx.status = status
  ngx.header["Content-Type"] = "application/json"
  for name, value in pairs(extra_headers or {}) do
    ngx.header[name] = value
  end
  ngx.say(cjson.encode({ error = { message = message, type = kind, code = status } }))
  return ngx.exit(status)
end

-- Bearer API key, when keys are configured; the key's name goes to the audit log, never the key.
local function authorize()
  if next(conf.api_keys) == nil then
    return
  end
  local header = ngx.var.http_authorization or ""
  local key = header:match("^[Bb]earer%s+(%S+)%s*$")
  local name = key and conf.api_keys[sha256_hex(key)]
  if not name then
    return reject(401, "missing or invalid API key", "authentication_error",
      { ["WWW-Authenticate"] = 'Bearer realm="llmops.vllm"' })
  end
  ngx.var.edge_api_key = name
end

local function body_model()
  ngx.req.read_body()
  local body = ngx.req.get_body_data()
  if not body then
    local file = ngx.req.get_body_file()
    if file then
      local handle = io.open(file, "rb")
      if handle then
        body = handle:read("*a")
        handle:close()
      end
    end
  end
  if not body or body == "" then
    return nil
  end
  local request = cjson.decode(body)
  if type(request) ~= "table" then
    return reject(400, "the request body is not a JSON object", "invalid_request_error")
  end
  local model = request.model
  if model ~= nil and type(model) ~= "string" then
    return reject(400, "model must be a string", "invalid_request_error")
  end
  return model
end

-- Fault injection: the configured share of the model API requests whose path (for /instances/<name>/<path>,
-- <path>) starts with one of the fault's paths gets the configured status, evenly spread (a shared counter, not
-- dice: 0.1 is every tenth request, so any window sees the configured share). After mTLS, rate limits and the
-- API key (those answers stay as they are), before routing: vLLM sees nothing of a faulted request.
local function inject_fault(path)
  local fault = conf.fault
  if not fault then
    return
  end
  local picked = false
  for _, prefix in ipairs(fault.paths) do
    if path:sub(1, #prefix) == prefix then
      picked = true
      break
    end
  end
  if not picked then
    return
  end
  local seen = ngx.shared[STATS]:incr("fault_seen", 1, 0)
  if math.floor(seen * fault.share) == math.floor((seen - 1) * fault.share) then
    return
  end
  ngx.var.edge_fault = "1"
  return reject(fault.status, FAULT_MESSAGE, "fault_injection")
end

-- Model API: the body's "model" picks the upstream; without one, the node's only model.
function _M.route()
  authorize()
  inject_fault(ngx.var.uri)
  local model = body_model() or conf.default_model
  if not model then
    return reject(400, "the request names no model, and this node serves several: "
      .. table.concat(conf.model_names, ", "), "invalid_request_error")
  end
  local upstream = conf.models[model]
  if not upstream then
    -- The client's string is not logged or echoed: it could be anything.
    return reject(404, "this node does not serve the requested model; it serves: "
      .. table.concat(conf.model_names, ", "), "not_found_error")
  end
  ngx.var.edge_model = model
  ngx.var.edge_upstream = upstream
end

-- /instances/<name>/<path>: one instance; its /metrics and /health need no API key (mTLS only).
function _M.route_instance()
  local instance = conf.instances[ngx.var.edge_instance_name]
  if not instance then
    return reject(404, "no such instance on this node", "not_found_error")
  end
  local rest = ngx.var.edge_instance_path
  if rest == "/metrics" or rest == "/health" then
    ngx.ctx.edge_probe = true
  else
    if not (rest:sub(1, 4) == "/v1/" or api_paths[rest]) then
      return reject(404, "the edge does not expose this path", "not_found_error")
    end
    authorize()
    inject_fault(rest)
  end
  ngx.var.edge_model = instance.model
  ngx.var.edge_upstream = instance.upstream
end

-- GET /v1/models: the node's catalogue.
function _M.models()
  authorize()
  local data = {}
  for _, name in ipairs(conf.model_names) do
    data[#data + 1] = { id = name, object = "model", owned_by = "llmops.vllm" }
  end
  ngx.header["Content-Type"] = "application/json"
  ngx.say(cjson.encode({ object = "list", data = data }))
end

-- Body filter: keep the response's tail; at its end, read vLLM's usage (the last one, for streams).
function _M.account()
  local chunk, eof = ngx.arg[1], ngx.arg[2]
  local ctx = ngx.ctx
  if chunk ~= "" then
    local tail = (ctx.edge_tail or "") .. chunk
    if #tail > TAIL then
      tail = tail:sub(-TAIL)
    end
    ctx.edge_tail = tail
  end
  if eof and ctx.edge_tail then
    local prompt, completion
    for p in ctx.edge_tail:gmatch('"prompt_tokens"%s*:%s*(%d+)') do
      prompt = p
    end
    for c in ctx.edge_tail:gmatch('"completion_tokens"%s*:%s*(%d+)') do
      completion = c
    end
    if prompt then
      ngx.var.edge_prompt_tokens = prompt
    end
    if completion then
      ngx.var.edge_completion_tokens = completion
    end
    ctx.edge_tail = nil
  end
end

-- The last of a list such as $upstream_header_time's "0.002, -" or "- : 0.010" (retries, internal redirects).
local function last_entry(list)
  return list and list:match("([^%s,:]+)%s*$")
end

-- Log phase of the client-traffic locations: one response more in its status class (an instance's /metrics and
-- /health are probes, not counted: Prometheus' scrapes would dilute a quiet node's error share). A 502 or 504 that the
-- edge made itself because vLLM did not answer (refused, reset, timed out before a header: the last
-- $upstream_header_time is "-") is also an upstream error; a 502 or 504 that vLLM sent is not.
function _M.count()
  local stats = ngx.shared[STATS]
  if not stats or ngx.ctx.edge_probe then
    return
  end
  local status = tonumber(ngx.var.status) or 0
  local class = "none"
  if status >= 100 and status <= 599 then
    class = math.floor(status / 100) .. "xx"
  end
  stats:incr("responses_" .. class, 1, 0)
  if (status == 502 or status == 504) and last_entry(ngx.var.upstream_header_time) == "-" then
    stats:incr("upstream_errors", 1, 0)
  end
  if ngx.var.edge_fault == "1" then
    stats:incr("fault_injected", 1, 0)
  end
end

local function family(lines, name, help)
  lines[#lines + 1] = "# HELP " .. name .. " " .. help
  lines[#lines + 1] = "# TYPE " .. name .. " counter"
end

-- GET /edge/metrics: the counters in Prometheus' text format 0.0.4, every series from the first scrape on.
function _M.metrics()
  local stats = ngx.shared[STATS]
  local function value(key)
    return string.format("%.0f", stats and stats:get(key) or 0)
  end
  local lines = {}
  family(lines, "llmops_edge_responses_total",
    "Answers to client requests (model API, /v1/models, /instances/<name>/v1/...) by status class; "
    .. "none: the client went away before an answer.")
  for _, class in ipairs(CLASSES) do
    lines[#lines + 1] = 'llmops_edge_responses_total{class="' .. class .. '"} ' .. value("responses_" .. class)
  end
  family(lines, "llmops_edge_upstream_errors_total",
    "502 and 504 answers the edge made because the vLLM instance did not answer.")
  lines[#lines + 1] = "llmops_edge_upstream_errors_total " .. value("upstream_errors")
  family(lines, "llmops_edge_fault_injected_total", "Client requests answered by fault injection.")
  lines[#lines + 1] = "llmops_edge_fault_injected_total " .. value("fault_injected")
  ngx.header["Content-Type"] = "text/plain; version=0.0.4; charset=utf-8"
  ngx.header["Cache-Control"] = "no-store"
  ngx.print(table.concat(lines, "\n") .. "\n")
end

return _M
