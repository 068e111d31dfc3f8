# Provider-free on purpose: everything here is plain expressions, so `terraform init`, `validate`
# and `test` run offline and every operator file it renders is checked by `meridian check-config`
# in the test suite (tests/deploy/test_terraform.py).
terraform {
  required_version = ">= 1.6.0"
}
