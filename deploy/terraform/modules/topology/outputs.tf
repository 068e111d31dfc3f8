output "operator_files" {
  description = "Each region's operator file (YAML), keyed by region: mount it at /etc/meridian/gateway.yaml."
  value       = { for name, config in local.operator_configs : name => "${local.header}${yamlencode(config)}" }
}

output "operator_configs" {
  description = "The same files as values, for assertions and for other modules."
  value       = local.operator_configs
}

output "models" {
  description = "Models served in each region by its own backends (before chain links)."
  value       = local.models_in
}

output "steering_records" {
  description = "One latency-based DNS record per region for var.dns_name, each with the health check that takes the region out when its gateways are not ready."
  value = {
    for name in local.region_names : name => {
      set_identifier  = name
      dns_name        = var.dns_name
      latency_region  = var.regions[name].latency_region
      target          = regex("^https?://([^/:]+)", var.regions[name].gateway_url)[0]
      health_protocol = startswith(var.regions[name].gateway_url, "https://") ? "HTTPS" : "HTTP"
      health_port     = tonumber(try(regex(":([0-9]+)$", var.regions[name].gateway_url)[0], startswith(var.regions[name].gateway_url, "https://") ? 443 : 80))
      health_path     = "/readyz"
    }
  }
}

output "termination_grace_period_s" {
  description = "The least terminationGracePeriodSeconds (or container stop timeout) that lets a drain finish: preStop pause 5 s + readiness grace + deadline + 10 s margin."
  value       = 5 + var.drain.readiness_grace_s + var.drain.deadline_s + 10
}
