# terraform test (offline: the module has no providers). The three-region example's inputs,
# cut to what each assertion needs.

variables {
  regions = {
    us-east = {
      location       = { lat = 38.9, lon = -77.4 }
      gateway_url    = "https://us-east.gw.test"
      latency_region = "us-east-1"
      redis          = { url = "redis://meridian-redis:6379/0", password_file = "/s/redis" }
    }
    eu-west = {
      location       = { lat = 53.3, lon = -6.3 }
      gateway_url    = "http://eu-west.gw.test:8080"
      latency_region = "eu-west-1"
      redis          = { url = "rediss://cache.test:6379/0", tls = true }
    }
    ap-southeast = {
      location       = { lat = 1.35, lon = 103.8 }
      gateway_url    = "https://ap-southeast.gw.test"
      latency_region = "ap-southeast-1"
    }
  }
  rtt_ms = {
    us-east = { eu-west = 80, ap-southeast = 215 }
    eu-west = { ap-southeast = 170 }
  }
  links = [
    { from = "us-east", to = "eu-west" },
    { from = "us-east", to = "ap-southeast" },
    { from = "eu-west", to = "us-east" },
  ]
  backends = [
    { name = "use1", region = "us-east", url = "http://use1:8000/v1", models = ["m70"], capacity = { max_num_seqs = 64 } },
    { name = "use1-sl", region = "us-east", kind = "serverless", engine = "openai", url = "https://sl.test/v1", models = ["m70"], api_key_file = "/s/key" },
    { name = "euw1", region = "eu-west", engine = "sglang", url = "http://euw1:30000/v1", models = ["m70"] },
    { name = "aps1", region = "ap-southeast", url = "http://aps1:8000/v1", models = ["m8", "m70"], price = { hourly = 41 } },
  ]
  settings = { routing = { policy = "predicted_ttft" } }
  hop_key  = { file = "/s/hop", sha256 = "0000000000000000000000000000000000000000000000000000000000000000" }
}

run "one_operator_file_per_region" {
  command = plan
  assert {
    condition     = toset(keys(output.operator_files)) == toset(["us-east", "eu-west", "ap-southeast"])
    error_message = "expected one operator file per region"
  }
  assert {
    condition     = alltrue([for name, text in output.operator_files : yamldecode(text).region == name])
    error_message = "each file names its own region"
  }
  assert {
    condition     = output.operator_configs["us-east"].routing.policy == "predicted_ttft"
    error_message = "settings are copied into every file"
  }
  assert {
    condition     = output.operator_configs["eu-west"].admin == { host = "0.0.0.0", port = 9090 }
    error_message = "the admin listener is on the pod network at the port the manifests expect"
  }
}

run "round_trips_seen_from_each_region" {
  command = plan
  assert {
    condition     = { for r in output.operator_configs["eu-west"].regions : r.name => r.rtt_ms } == { us-east = 80, eu-west = 1, ap-southeast = 170 }
    error_message = "eu-west's round trips: the reverse of us-east->eu-west, its own local one, and eu-west->ap-southeast"
  }
}

run "chain_links_become_gateway_backends" {
  command = plan
  assert {
    condition     = join(",", [for b in output.operator_configs["us-east"].backends : b.name if b.kind == "gateway"]) == "eu-west-gateway,ap-southeast-gateway"
    error_message = "us-east links to both other regions"
  }
  assert {
    condition     = join(",", one([for b in output.operator_configs["us-east"].backends : b if b.name == "ap-southeast-gateway"]).models) == "m70,m8"
    error_message = "a link serves what the linked region's backends serve"
  }
  assert {
    condition     = one([for b in output.operator_configs["us-east"].backends : b if b.name == "eu-west-gateway"]).url == "http://eu-west.gw.test:8080/v1"
    error_message = "a link points at the linked gateway's /v1"
  }
  assert {
    condition     = length([for b in output.operator_configs["ap-southeast"].backends : b if b.kind == "gateway"]) == 0
    error_message = "ap-southeast has no links"
  }
}

run "gateways_authenticate_to_each_other_with_the_hop_key" {
  command = plan
  assert {
    condition     = alltrue([for b in output.operator_configs["us-east"].backends : b.api_key == { file = "/s/hop" } if b.kind == "gateway"])
    error_message = "every link sends the hop secret from its file"
  }
  assert {
    condition     = alltrue([for name, c in output.operator_configs : c.auth.mode == "keys" && c.auth.hop_keys == ["0000000000000000000000000000000000000000000000000000000000000000"]])
    error_message = "every region requires keys and accepts the hop key's hash"
  }
}

run "secrets_are_references_and_unset_parts_are_left_out" {
  command = plan
  assert {
    condition     = one([for b in output.operator_configs["us-east"].backends : b if b.name == "use1-sl"]).api_key == { file = "/s/key" }
    error_message = "an API key is a file reference"
  }
  assert {
    condition     = !contains(keys(one([for b in output.operator_configs["us-east"].backends : b if b.name == "use1"])), "api_key")
    error_message = "no api_key where none is given"
  }
  assert {
    condition     = output.operator_configs["ap-southeast"].state == { backend = "memory" }
    error_message = "a region without Redis keeps its state in memory"
  }
  assert {
    condition     = output.operator_configs["eu-west"].state.tls == { enabled = true } && output.operator_configs["us-east"].state.password_file == "/s/redis"
    error_message = "Redis TLS and password file are carried over"
  }
}

run "steering_records_health_check_readyz" {
  command = plan
  assert {
    condition     = output.steering_records["eu-west"] == { set_identifier = "eu-west", dns_name = "gateway.example.com", latency_region = "eu-west-1", target = "eu-west.gw.test", health_protocol = "HTTP", health_port = 8080, health_path = "/readyz" }
    error_message = "an http gateway with a port: HTTP health check on that port"
  }
  assert {
    condition     = output.steering_records["us-east"].health_port == 443 && output.steering_records["us-east"].health_protocol == "HTTPS"
    error_message = "https without a port: 443"
  }
  assert {
    condition     = output.termination_grace_period_s == 50
    error_message = "the stop budget covers preStop, readiness grace and drain deadline"
  }
}

run "a_bad_region_name_is_refused" {
  command = plan
  variables {
    regions = {
      US_East = {
        location       = { lat = 0, lon = 0 }
        gateway_url    = "https://x.test"
        latency_region = "us-east-1"
      }
    }
    rtt_ms   = {}
    links    = []
    backends = []
  }
  expect_failures = [var.regions]
}
