"""brokers"""
