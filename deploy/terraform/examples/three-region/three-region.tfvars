# Three regional gateway tiers (us-east, eu-west, ap-southeast), each with its own dedicated
# vLLM pool and a serverless endpoint, chained to the other two, steered by latency-based DNS.
# Replace the URLs, hostnames and the zone with yours; the keys stay out of this file.

dns_name        = "gateway.example.com"
route53_zone_id = "Z0000000EXAMPLE"

regions = {
  us-east = {
    location       = { lat = 38.9, lon = -77.4 }
    gateway_url    = "https://us-east.gateway.example.com"
    latency_region = "us-east-1"
    # Small setup: Redis as a StatefulSet beside the gateways (deploy/kubernetes/components/redis).
    redis = { url = "redis://meridian-redis:6379/0", password_file = "/etc/meridian-secrets/redis-password" }
  }
  eu-west = {
    location       = { lat = 53.3, lon = -6.3 }
    gateway_url    = "https://eu-west.gateway.example.com"
    latency_region = "eu-west-1"
    # Real setup: a managed Redis (ElastiCache, Memorystore, Azure Cache) over TLS.
    redis = { url = "rediss://meridian-euw.cache.example.com:6379/0", password_file = "/etc/meridian-secrets/redis-password", tls = true }
  }
  ap-southeast = {
    location       = { lat = 1.35, lon = 103.8 }
    gateway_url    = "https://ap-southeast.gateway.example.com"
    latency_region = "ap-southeast-1"
    redis          = { url = "rediss://meridian-aps.cache.example.com:6379/0", password_file = "/etc/meridian-secrets/redis-password", tls = true }
  }
}

# Round trips between the regions, measured (the gateways refine them with probes).
rtt_ms = {
  us-east = { eu-west = 80, ap-southeast = 215 }
  eu-west = { ap-southeast = 170 }
}

# Every gateway may forward to the other two.
links = [
  { from = "us-east", to = "eu-west" },
  { from = "us-east", to = "ap-southeast" },
  { from = "eu-west", to = "us-east" },
  { from = "eu-west", to = "ap-southeast" },
  { from = "ap-southeast", to = "us-east" },
  { from = "ap-southeast", to = "eu-west" },
]

backends = [
  {
    name     = "use1-h100"
    region   = "us-east"
    engine   = "vllm"
    url      = "http://vllm-h100.inference.svc.cluster.local:8000/v1"
    models   = ["llama-3.1-70b-instruct"]
    capacity = { max_num_seqs = 256, prefill_tokens_per_s = 12000, itl_ms = 18 }
    price    = { hourly = 98.3 }
  },
  {
    name         = "use1-serverless"
    region       = "us-east"
    kind         = "serverless"
    engine       = "openai"
    url          = "https://inference.example.com/v1"
    models       = ["llama-3.1-70b-instruct"]
    api_key_file = "/etc/meridian-secrets/serverless-api-key"
    capacity     = { cold_start_ms = 8000, idle_timeout_s = 300 }
    price        = { prompt_per_mtok = 0.6, completion_per_mtok = 0.8 }
  },
  {
    name     = "euw1-h100"
    region   = "eu-west"
    engine   = "sglang"
    url      = "http://sglang-h100.inference.svc.cluster.local:30000/v1"
    models   = ["llama-3.1-70b-instruct"]
    capacity = { max_num_seqs = 192, prefill_tokens_per_s = 11000, itl_ms = 20 }
    price    = { hourly = 104.0 }
  },
  {
    name     = "aps1-l40s"
    region   = "ap-southeast"
    engine   = "vllm"
    url      = "http://vllm-l40s.inference.svc.cluster.local:8000/v1"
    models   = ["llama-3.1-8b-instruct", "llama-3.1-70b-instruct"]
    capacity = { max_num_seqs = 128, prefill_tokens_per_s = 6000, itl_ms = 28 }
    price    = { hourly = 41.0 }
  },
]

# Gateways authenticate to each other with one shared hop secret, mounted from the namespace's
# meridian-secrets Secret; its SHA-256 (sha256sum hop-key) is what each gateway accepts. Replace
# it with your secret's hash.
hop_key = {
  file   = "/etc/meridian-secrets/hop-key"
  sha256 = "5e2bf57d3f40c4b6df69daf1936cb766f832374b4fc0259a7cbff06e2f70f269"
}

settings = {
  routing  = { policy = "predicted_ttft" }
  timeouts = { connect_s = 3, first_token_s = 30, inter_token_s = 30, total_s = 600 }
  logging  = { format = "json" }
}
