"""The control API's routes, one module per resource group; ``sparkcq.server.app`` joins them."""
