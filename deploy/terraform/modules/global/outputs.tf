output "health_check_ids" {
  description = "Route 53 health check per region (alarm on these: a failing one means the region is out of DNS answers)."
  value       = { for name, check in aws_route53_health_check.region : name => check.id }
}

output "dns_name" {
  description = "The one name clients use."
  value       = one(distinct([for r in var.steering_records : r.dns_name]))
}
