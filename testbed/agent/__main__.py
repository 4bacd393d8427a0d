"""``python -m testbed.agent CONFIG.json``: how the fabric starts each switch's agent."""

from testbed.agent.switch import main

main()
