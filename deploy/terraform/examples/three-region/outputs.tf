output "operator_files" {
  description = "What each region's gateways were given (also in their ConfigMap)."
  value       = module.topology.operator_files
}

output "dns_name" {
  description = "Point clients here."
  value       = module.global.dns_name
}

output "health_check_ids" {
  description = "Watch these first: a failing check means a region is out of the DNS answers."
  value       = module.global.health_check_ids
}
