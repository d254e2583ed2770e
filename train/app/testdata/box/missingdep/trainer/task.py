print("never runs")
