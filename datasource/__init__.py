"""datasource"""
