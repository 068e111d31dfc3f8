"""What measures Meridian: the emulated GPU fleet, the load generator and the fleet simulator."""
