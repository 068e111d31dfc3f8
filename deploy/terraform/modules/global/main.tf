# Client steering: one name, one latency-based record per region, each tied to a health check
# of that region's /readyz (which fails while its gateways drain or have no usable backend).
# Route 53 answers each resolver with the lowest-latency region whose check passes.
#
# Other providers need the same three things: latency (or geo) steering, a health check per
# target on /readyz, and answers that drop unhealthy targets. Cloudflare: a Load Balancer with
# a monitor on /readyz and dynamic (RTT) steering over one pool per region. Google Cloud DNS:
# routing policy `geo` with health-checked targets (internal load balancers) or a global
# external Application Load Balancer in front of the regions. Azure: Traffic Manager with the
# Performance routing method and an endpoint monitor on /readyz.

resource "aws_route53_health_check" "region" {
  for_each = var.steering_records

  fqdn              = each.value.target
  port              = each.value.health_port
  type              = each.value.health_protocol
  resource_path     = each.value.health_path
  request_interval  = var.health_check.request_interval_s
  failure_threshold = var.health_check.failure_threshold
  measure_latency   = true
  # SNI carries the region's own hostname, so its certificate matches.
  enable_sni = each.value.health_protocol == "HTTPS"

  tags = {
    Name              = "meridian-${each.key}-readyz"
    "meridian/region" = each.key
  }
}

resource "aws_route53_record" "region" {
  for_each = var.steering_records

  zone_id        = var.zone_id
  name           = each.value.dns_name
  type           = "CNAME"
  ttl            = var.ttl_s
  records        = [each.value.target]
  set_identifier = each.value.set_identifier

  latency_routing_policy {
    region = each.value.latency_region
  }

  health_check_id = aws_route53_health_check.region[each.key].id
}
