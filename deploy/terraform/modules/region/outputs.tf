output "namespace" {
  description = "Where the region's gateways run."
  value       = local.namespace
}

output "services" {
  description = "In-cluster addresses of the region's Services (expose meridian-http through the region's load balancer or ingress at the topology's gateway_url)."
  value = {
    http  = "meridian-http.${local.namespace}.svc:80"
    grpc  = "meridian-grpc.${local.namespace}.svc:50051"
    admin = "meridian-admin.${local.namespace}.svc:9090"
  }
}
